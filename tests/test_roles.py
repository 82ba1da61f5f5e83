"""The least-privilege set-ups of docs/operations.md, run exactly as written (the SQL blocks are
read from that page, so it cannot drift from what is tested): an owner role that migrates and runs
the audits, a reader role through which the audits read their source, a reporting role that only
reads the results; on PostgreSQL and MariaDB, with roles and a database unique to the test."""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from biasaudit.db.engine import make_engine, parse_url
from biasaudit.db.retry import is_transient
from biasaudit.db.store.history import list_runs
from biasaudit.db.store.load import load_predictions
from biasaudit.db.store.migrate import views
from biasaudit.flows.cli import app
from biasaudit.flows.demo import END, GROUPS, synthetic_predictions

from .conftest import MARIADB_URL, POSTGRES_URL, REQUIRE_MARIADB, REQUIRE_POSTGRES

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = {
    "postgresql": "Least-privilege set-up (PostgreSQL)",
    "mariadb": "Least-privilege set-up (MariaDB)",
}
ROLES = ("owner", "reader", "reporting")
PASSWORDS = {role: f"{role}-{uuid.uuid4().hex[:8]}" for role in ROLES}

pytestmark = pytest.mark.usefixtures("prefect_harness")


def setup_blocks(kind: str) -> list[tuple[str, str]]:
    """(who runs it, SQL) of each ```sql block of docs/operations.md's set-up for ``kind``, in order; who
    from the block's first line, ``-- as WHO``."""
    page = (ROOT / "docs" / "operations.md").read_text()
    section = page.split(f"### {SECTIONS[kind]}\n", 1)[1].split("\n#", 1)[0]
    blocks = re.findall(r"```sql\n(.*?)```", section, re.DOTALL)
    assert blocks, f"no SQL in the docs/operations.md section {SECTIONS[kind]!r}"
    return [(re.match(r"-- as (\w+)", block).group(1), block) for block in blocks]  # type: ignore[union-attr]


def exit_code(args: list[str]) -> int:
    """The exit code of ``biasaudit ARGS`` run in this process (see tests/test_every_key.py)."""
    code = app(args, standalone_mode=False)
    return 0 if code is None else int(code)


class Server:
    """The test server of ``kind``: runs SQL through its own command-line client, as a reader of
    the page would, and makes URLs for the set-up's roles."""

    def __init__(self, kind: str, suffix: str) -> None:
        self.kind = kind
        self.url = parse_url(POSTGRES_URL if kind == "postgresql" else MARIADB_URL)
        self.database = f"biasaudit_roles_{suffix}"
        self.names = {f"biasaudit_{role}": f"biasaudit_{role}_{suffix}" for role in ROLES}
        client = "psql" if kind == "postgresql" else "mariadb"
        self.client = shutil.which(client)
        required = REQUIRE_POSTGRES if kind == "postgresql" else REQUIRE_MARIADB
        if self.client is None:
            (pytest.fail if required else pytest.skip)(f"the {client} client is not installed")

    def unique(self, sql: str) -> str:
        """The page's SQL with this test's role and database names."""
        names = {**self.names, "biasaudit": self.database}
        return re.sub(r"\bbiasaudit(_owner|_reader|_reporting)?\b", lambda m: names[m[0]], sql)

    def role_url(self, role: str | None, password: bool = True) -> URL:
        user = self.url.username if role is None else self.names[f"biasaudit_{role}"]
        secret = PASSWORDS.get(role or "") if password else None
        database = self.url.database if role is None else self.database
        return self.url.set(username=user, password=secret, database=database)

    def run_sql(self, who: str, sql: str) -> None:
        """Run ``sql`` as ``who`` (the block's ``-- as`` line) with the server's client."""
        role = None if who in ("a", "root") else who.removeprefix("biasaudit_")
        url = self.role_url(role)
        if self.kind == "postgresql":
            command = [self.client, "-X", "-v", "ON_ERROR_STOP=1", "-h", url.host, "-p"]
            command += [str(url.port or 5432), "-U", url.username, "-d", url.database]
            command += [a for role in ROLES for a in ("-v", f"{role}_password={PASSWORDS[role]}")]
        else:
            command = [self.client, "-h", url.host, "-P", str(url.port or 3306), "-u"]
            command += [url.username] + ([f"-p{url.password}"] if url.password else [])
            command += [url.database] if role is not None else []
        done = subprocess.run(
            command, input=sql, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0 and "ERROR" not in done.stderr, done.stderr

    def drop(self) -> None:
        admin = create_engine(self.url, isolation_level="AUTOCOMMIT")
        quote = '"' if self.kind == "postgresql" else "`"
        force = " WITH (FORCE)" if self.kind == "postgresql" else ""
        with admin.connect() as connection:
            connection.execute(
                text(f"DROP DATABASE IF EXISTS {quote}{self.database}{quote}{force}")
            )
            for name in self.names.values():
                what = "ROLE" if self.kind == "postgresql" else "USER"
                connection.execute(text(f"DROP {what} IF EXISTS {quote}{name}{quote}"))
        admin.dispose()


def _mariadb_passwords(blocks: list[tuple[str, str]]) -> None:
    """The passwords written in the MariaDB blocks (its client has no variables)."""
    PASSWORDS.update(
        re.findall(r"CREATE USER biasaudit_(\w+) IDENTIFIED BY '([^']*)'", blocks[0][1])
    )


def _refused(url: URL, statement: str) -> bool:
    """Whether the database refuses ``statement`` to the role of ``url`` for lack of privilege
    (an error the retry policy does not retry)."""
    engine = make_engine(url.render_as_string(hide_password=False))
    try:
        with engine.begin() as connection:
            connection.execute(text(statement))
    except DBAPIError as exc:
        assert not is_transient(exc), exc  # a refusal is not retried
        return bool(
            re.search(
                r"permission denied|command denied|must be owner", str(exc.orig), re.IGNORECASE
            )
        )
    finally:
        engine.dispose()
    return False


@pytest.mark.parametrize("kind", ["postgresql", "mariadb"])
def test_the_documented_least_privilege_roles_work(kind, tmp_path, monkeypatch):
    """It migrates and runs two audits (the second compared with the first) as the owner, the
    source read through the reader; `history` and `report` work as the reporting role; the
    reader cannot write and the reporting role can change nothing."""
    blocks = setup_blocks(kind)
    if kind == "mariadb":
        _mariadb_passwords(blocks)
    server = Server(kind, uuid.uuid4().hex[:10])
    (setup_who, setup), (grants_who, grants) = blocks
    assert setup_who in ("a", "root") and grants_who == "biasaudit_owner"
    try:
        server.run_sql(setup_who, server.unique(setup))
        owner = server.role_url("owner").render_as_string(hide_password=False)
        assert exit_code(["db", "upgrade", "--db", owner]) == 0
        data = synthetic_predictions()
        data = data[data["model_id"] == "credit-scorer"]
        load_predictions(make_engine(owner), data, list(GROUPS), "roles")
        server.run_sql(grants_who, server.unique(grants))

        reader = server.role_url("reader", password=False).render_as_string()
        config = tmp_path / "roles.toml"
        config.write_text(
            f'[[audits]]\nname = "a"\nmodel = "credit-scorer"\nattributes = ["race", "sex"]\n'
            f'window = "last_30_days"\nsource_db = "{reader}"\n'
        )
        monkeypatch.setenv("BIASAUDIT_SOURCE_DB_PASSWORD", PASSWORDS["reader"])
        monkeypatch.setenv("BIASAUDIT_REPORTS_DIR", str(tmp_path / "reports"))
        for as_of in ("2026-10-20", END.isoformat()):
            run = ["run", "a", "-c", str(config), "--db", owner, "--as-of", as_of]
            assert exit_code(run) == 0
        runs = list_runs(make_engine(owner)).sort_values("id")
        assert runs["status"].tolist() == ["succeeded", "succeeded"]
        second = int(runs["id"].max())
        with make_engine(owner).connect() as connection:
            compared = connection.scalar(
                text(f"SELECT count(*) FROM comparison_results WHERE run_id = {second}")
            )
        assert compared > 0  # the second run was compared with the first
        assert len(list((tmp_path / "reports").glob("*.html"))) == 2  # each run's report

        reporting = server.role_url("reporting").render_as_string(hide_password=False)
        assert exit_code(["history", "--db", reporting]) == 0
        assert exit_code(["history", str(second), "--db", reporting]) == 0
        page = tmp_path / "again.html"
        assert exit_code(["report", str(second), "--db", reporting, "--out", str(page)]) == 0
        assert page.stat().st_size > 10_000
        viewer = make_engine(reporting)  # reads every view, as BI tools and Grafana do
        with viewer.connect() as connection:
            for view, _ in views():
                assert connection.execute(text(f"SELECT count(*) FROM {view}")).scalar_one() > 0
        viewer.dispose()

        reader_url, reporting_url = server.role_url("reader"), server.role_url("reporting")
        assert _refused(reader_url, "DELETE FROM predictions")
        assert _refused(reader_url, "SELECT count(*) FROM audit_runs")
        assert _refused(reporting_url, "DELETE FROM audit_runs")
        assert _refused(reporting_url, "UPDATE metric_results SET value = 0")
        assert _refused(reporting_url, "DROP TABLE comparison_results")
        assert _refused(reporting_url, "SELECT count(*) FROM predictions")
    finally:
        server.drop()
