"""Shared fixtures: throw-away SQLite and PostgreSQL databases and one Prefect test harness.

Conventions (the suite runs in parallel, one pytest-xdist worker per core):
- no test relies on another or on their order; files go under ``tmp_path``/``tmp_path_factory``
  only, never into the repository or a fixed path;
- databases come from the fixtures below (``db_url``, ``source_db_url``, ``postgres_server_url``,
  ``mariadb_server_url``, ``separate_database``): every name is unique per worker; ClickHouse and
  Spark clusters (``clickhouse_url``, ``spark_url``, ``engine_url``) are started once per worker,
  each under its own folder and free ports;
- servers and proxies bind port 0 (or ask for a free port), never a fixed one;
- ``@pytest.mark.slow`` marks a test that takes over ~20 s on its own (long simulations, end to end
  through real servers): ``make test`` leaves it out, ``make test-slow`` runs it, CI runs both.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path

# Prefect reads its settings at import: isolate it before anything imports it. The Prefect home
# (whose SQLite database every temporary server of a `biasaudit run` opens) and the reports folder
# (named by audit and run id, alike in every worker) are set, not defaulted, in every process:
# pytest-xdist's workers inherit the environment of the controller, which imports this file too,
# so a default would be one folder shared by all the workers.
os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="biasaudit-prefect-")
os.environ["BIASAUDIT_REPORTS_DIR"] = tempfile.mkdtemp(prefix="biasaudit-reports-")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("BIASAUDIT_RETRY_BASE_SECONDS", "0.2")  # retries still back off, briefly

import functools
import importlib.util
import random

import numpy as np
import pytest
import websockets.asyncio.connection
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from biasaudit.db.engine import make_engine, parse_url
from biasaudit.db.store.migrate import upgrade
from biasaudit.tasks import planning

POSTGRES_URL = os.environ.get(
    "BIASAUDIT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REQUIRE_POSTGRES = os.environ.get("BIASAUDIT_REQUIRE_POSTGRES") == "1"
MARIADB_URL = os.environ.get(
    "BIASAUDIT_TEST_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306/mysql"
)
REQUIRE_MARIADB = os.environ.get("BIASAUDIT_REQUIRE_MARIADB") == "1"
REQUIRE_CLICKHOUSE = os.environ.get("BIASAUDIT_REQUIRE_CLICKHOUSE") == "1"
REQUIRE_SPARK = os.environ.get("BIASAUDIT_REQUIRE_SPARK") == "1"
# Once a test has run a flow, Prefect's events client keeps a websocket open in a background thread,
# and websockets draws every keepalive ping's payload from the global `random` module. Hypothesis
# fails a property test (warnings are errors) when the global random state changes while it draws
# an example, so a ping landing then made the property tests fail at random. The pings get a
# generator of their own; nothing else in the process draws from the global one in the background.
websockets.asyncio.connection.random = random.Random()  # type: ignore[assignment]


def _remembered(function):
    """``function`` remembering its result per distinct arguments (arrays by dtype, shape and
    bytes), each caller given a copy."""
    results: dict = {}

    def key(value):
        if isinstance(value, np.ndarray | list | tuple):
            array = np.asarray(value)
            return (array.dtype.str, array.shape, array.tobytes())
        return value

    @functools.wraps(function)
    def remembered(*args, **kwargs):
        found = (tuple(map(key, args)), tuple(sorted((k, key(v)) for k, v in kwargs.items())))
        if found not in results:
            results[found] = function(*args, **kwargs)
        return results[found].copy()

    return remembered


# Planning's exact powers are most of an audit's CPU and a pure function of their arguments, and the
# suite audits the same few loads with the same settings hundreds of times: in each test process,
# the powers planning asks for are computed once per distinct argument set (the demo's credit-race
# audit of 3,000 rows, measured: 4.0 s CPU the first time, 1.2 s each time after). Every audit still computes its first plan for real and
# gets the same numbers; tests of the powers themselves call tasks.twosample_power.exact_powers, which
# stays as it is, and tests of an audit's memory or time run it in a fresh interpreter.
planning.exact_powers = _remembered(planning.exact_powers)

COMPAS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "compas-two-years.csv"
DEMO_CONFIG = Path(__file__).resolve().parents[1] / "flows" / "demo_audits.toml"


@pytest.fixture(scope="session")
def prefect_harness():
    """One Prefect test server for the whole session (start-up costs about 12 s)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


def _reachable_admin(url: str, label: str, required: bool, how: str):
    """An AUTOCOMMIT engine on the test server at ``url``; skip the test when it is not
    reachable, or fail it where ``required`` (``how`` names the setting that requires it)."""
    admin = create_engine(parse_url(url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text("SELECT 1"))
    except OperationalError as exc:
        admin.dispose()
        reason = f"{label} at {url} is not reachable: {exc.orig}"
        if required:
            pytest.fail(f"{reason} ({how})")
        pytest.skip(reason)
    return admin


@pytest.fixture(scope="session")
def postgres_server_url():
    """URL of a fresh database on the test PostgreSQL server, dropped at the end of the session."""
    admin = _reachable_admin(
        POSTGRES_URL, "PostgreSQL", REQUIRE_POSTGRES, "BIASAUDIT_REQUIRE_POSTGRES=1"
    )
    name = f"biasaudit_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield admin.url.set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def mariadb_server_url():
    """URL of a throw-away database on the test MariaDB server, dropped at the end of the session
    (BIASAUDIT_REQUIRE_MARIADB=1 makes an unreachable server a failure, as in CI)."""
    admin = _reachable_admin(MARIADB_URL, "MariaDB", REQUIRE_MARIADB, "BIASAUDIT_REQUIRE_MARIADB=1")
    name = f"biasaudit_test_{uuid.uuid4().hex[:12]}"
    yield admin, admin.url.set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
    admin.dispose()


def fresh_mariadb(server) -> str:
    """The session's MariaDB database, dropped and created empty (utf8mb4)."""
    admin, url = server
    name = url.rsplit("/", 1)[1]
    with admin.connect() as connection:
        connection.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
        connection.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    return url


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def db_url(request, tmp_path):
    """A migrated, empty database: a SQLite file, a fresh PostgreSQL schema state, or a fresh
    MariaDB database."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'audit.db'}"
    elif request.param == "mariadb":
        url = fresh_mariadb(request.getfixturevalue("mariadb_server_url"))
    else:
        url = request.getfixturevalue("postgres_server_url")
        engine = make_engine(url)
        with engine.begin() as connection:
            connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        engine.dispose()
    upgrade(url)
    return url


def _missing(what: str, reason: str, required: bool, how: str):
    """Skip for lack of an engine, or fail where it is required (``how`` names the setting)."""
    if required:
        pytest.fail(f"{what}: {reason} ({how})")
    pytest.skip(f"{what}: {reason}")


@pytest.fixture(scope="session")
def clickhouse_url(tmp_path_factory):
    """A private ClickHouse cluster for the session (two shards; tests.clusters), started once per
    test process under its own folder and ports: the URL of the server holding the Distributed
    tables (tests.clusters.source_table creates them)."""
    from tests.clusters import CLICKHOUSE_SERVER, clickhouse_cluster

    how = "BIASAUDIT_REQUIRE_CLICKHOUSE=1"
    if importlib.util.find_spec("clickhouse_sqlalchemy") is None:
        _missing("ClickHouse", "clickhouse-sqlalchemy is not installed", REQUIRE_CLICKHOUSE, how)
    if not Path(CLICKHOUSE_SERVER).exists():
        _missing("ClickHouse", f"no {CLICKHOUSE_SERVER}", REQUIRE_CLICKHOUSE, how)
    with clickhouse_cluster(tmp_path_factory.mktemp("clickhouse")) as urls:
        yield urls[0]


@pytest.fixture(scope="session")
def spark_url(tmp_path_factory):
    """A private Spark standalone cluster for the session (master, two workers, Thrift server;
    tests.clusters), about 50-80 s to start, once per test process: its ``hive://`` URL."""
    from tests.clusters import SPARK_HOME, spark_cluster

    how = "BIASAUDIT_REQUIRE_SPARK=1"
    if importlib.util.find_spec("pyhive") is None:
        _missing("Spark", "PyHive is not installed", REQUIRE_SPARK, how)
    if not (SPARK_HOME / "bin" / "spark-submit").exists():
        _missing("Spark", f"no Spark at {SPARK_HOME} (make spark)", REQUIRE_SPARK, how)
    with spark_cluster(tmp_path_factory.mktemp("spark")) as url:
        yield url


# Spark's cluster takes 50-80 s to start (per worker that runs a Spark test): its tests are slow.
@pytest.fixture(params=["clickhouse", pytest.param("spark", marks=pytest.mark.slow)])
def engine_url(request):
    """A distributed SQL engine of the session holding source tables (ClickHouse or Spark):
    create them with tests.clusters.source_table."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture(params=["sqlite", "postgresql", "mariadb", "duckdb"])
def source_db_url(request, tmp_path):
    """An empty database to hold source tables (not migrated): SQLite, PostgreSQL, MariaDB or
    DuckDB (skipped when duckdb-engine is not installed)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'source.db'}"
    if request.param == "duckdb":
        pytest.importorskip("duckdb_engine")
        return f"duckdb:///{tmp_path / 'source.duckdb'}"
    if request.param == "mariadb":
        return fresh_mariadb(request.getfixturevalue("mariadb_server_url"))
    url = request.getfixturevalue("postgres_server_url")
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    return url


def on_databases(*kinds: str):
    """Run a ``db_url`` test on these databases only: for behaviour that is not dialect-specific
    (task runners, retries, failure injection, statistics over stored runs), once is proof enough;
    the dialect-specific SQL paths (store, migrations, views, scans, locks, datetimes) keep every
    database. Usage: ``@on_databases("sqlite")``."""
    return pytest.mark.parametrize("db_url", kinds, indirect=True)


@contextmanager
def separate_database(kind: str, folder: Path):
    """A migrated database of its own (not the session's PostgreSQL or MariaDB database, which
    function-scoped ``db_url`` tests empty), dropped on exit: for module-scoped fixtures."""
    if kind == "sqlite":
        url = f"sqlite:///{folder / 'shared.db'}"
        upgrade(url)
        yield url
        return
    server, require = (
        (POSTGRES_URL, REQUIRE_POSTGRES) if kind == "postgresql" else (MARIADB_URL, REQUIRE_MARIADB)
    )
    admin = _reachable_admin(server, kind, require, "required in CI")
    name = f"biasaudit_test_{uuid.uuid4().hex[:12]}"
    quoted = f'"{name}"' if kind == "postgresql" else f"`{name}`"
    create = f"CREATE DATABASE {quoted}" + (" CHARACTER SET utf8mb4" if kind == "mariadb" else "")
    drop = f"DROP DATABASE IF EXISTS {quoted}" + (" WITH (FORCE)" if kind == "postgresql" else "")
    with admin.connect() as connection:
        connection.execute(text(create))
    url = admin.url.set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        with admin.connect() as connection:
            connection.execute(text(drop))
        admin.dispose()


def insert_rows(engine, table, frame) -> None:
    """``frame``'s rows appended to the created ``table`` (NaN and NaT as NULL) by pandas'
    ``to_sql``, its parameters typed by the table's columns rather than guessed from the frame: on
    SQLAlchemy 2.1 a guessed text parameter is cast to text, which PostgreSQL refuses for an
    integer column. A timestamp column given as text stays text (SQLite's dynamic typing keeps
    the hostile values the scans must judge)."""
    from pandas.api.types import is_datetime64_any_dtype
    from sqlalchemy import Date, DateTime

    def as_given(name: str) -> bool:
        kind = table.columns[name].type
        return isinstance(kind, (Date, DateTime)) and not is_datetime64_any_dtype(frame[name])

    types = {name: table.columns[name].type for name in frame.columns if not as_given(name)}
    rows = frame.astype(object).where(frame.notna(), None)
    rows.to_sql(table.name, engine, if_exists="append", index=False, dtype=types)
