"""Private distributed SQL engines for tests and benchmarks, started under a folder of their own.

- ``clickhouse_cluster``: two ClickHouse servers (Debian's ``clickhouse-server``), each its own
  config, data directory and ports, run as the current user; the first also holds a
  ``Distributed`` table over both shards' local tables (``distributed_table``).
- ``spark_cluster``: a Spark standalone master, two one-core workers and the Thrift (HiveServer2)
  server as the driver, from the pyspark package (Java 17), reached through PyHive's ``hive://``.

Ports are chosen free, so parallel test workers each start their own. Each server runs in its own
process group and is killed with it on exit. ``source_table`` creates a table from SQLAlchemy
columns on any engine and fills it with one multi-row INSERT (row-by-row inserts cost a Spark job
each).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import date, datetime
from pathlib import Path

from sqlalchemy import (
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Float,
    Integer,
    Numeric,
    String,
    Table,
    Uuid,
    text,
)

CLUSTER = "biasaudit"
CLICKHOUSE_SERVER = shutil.which("clickhouse-server") or "/usr/sbin/clickhouse-server"
# Spark from the pyspark package, installed apart from the virtual environment (``make spark``):
# with pyspark importable, pandera imports pyspark.pandas, which warns on pandas 3 at every start.
SPARK_HOME = Path(
    os.environ.get("BIASAUDIT_SPARK_HOME", Path(__file__).resolve().parents[1] / ".spark/pyspark")
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(ready, what: str, seconds: float, processes: list[subprocess.Popen], log: Path):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for process in processes:
            if process.poll() is not None:
                raise RuntimeError(f"{what} exited with {process.returncode}; see {log}")
        with suppress(Exception):
            if ready():
                return
        time.sleep(0.3)
    raise RuntimeError(f"{what} not ready after {seconds:.0f} s; see {log}")


def _stop(processes: list[subprocess.Popen]):
    for process in reversed(processes):
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    for process in reversed(processes):
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _start(command: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    """Start a server in a process group of its own that gets SIGTERM when this process dies
    (util-linux's ``setpriv --pdeathsig``), so a test run killed before its teardown leaves no
    server behind."""
    guard = ["setpriv", "--pdeathsig", "TERM", "--"] if shutil.which("setpriv") else []
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*guard, *command], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


CLICKHOUSE_CONFIG = """<yandex>
  <logger><level>warning</level><log>{home}/server.log</log><errorlog>{home}/error.log</errorlog>
  </logger>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>{tcp}</tcp_port>
  <http_port>{http}</http_port>
  <interserver_http_port>{inter}</interserver_http_port>
  <path>{home}/data/</path>
  <tmp_path>{home}/tmp/</tmp_path>
  <user_files_path>{home}/user_files/</user_files_path>
  <users_config>{home}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mark_cache_size>268435456</mark_cache_size>
  <remote_servers><{cluster}>{shards}</{cluster}></remote_servers>
</yandex>
"""
CLICKHOUSE_USERS = """<yandex>
  <profiles><default><log_queries>0</log_queries></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas>
</yandex>
"""


@contextmanager
def clickhouse_cluster(folder: Path, shards: int = 2) -> Iterator[list[str]]:
    """Start ``shards`` ClickHouse servers under ``folder``; yield their HTTP SQLAlchemy URLs
    (the first is where the Distributed tables live)."""
    ports = [(free_port(), free_port(), free_port()) for _ in range(shards)]
    layout = "".join(
        f"<shard><replica><host>127.0.0.1</host><port>{tcp}</port></replica></shard>"
        for tcp, _, _ in ports
    )
    processes: list[subprocess.Popen] = []
    urls = []
    try:
        for number, (tcp, http, inter) in enumerate(ports):
            home = folder / f"clickhouse{number}"
            for sub in ("data", "tmp", "user_files"):
                (home / sub).mkdir(parents=True, exist_ok=True)
            config = CLICKHOUSE_CONFIG.format(
                home=home, tcp=tcp, http=http, inter=inter, cluster=CLUSTER, shards=layout
            )
            (home / "config.xml").write_text(config)
            (home / "users.xml").write_text(CLICKHOUSE_USERS)
            processes.append(
                _start(
                    [CLICKHOUSE_SERVER, f"--config-file={home / 'config.xml'}"],
                    home / "console.log",
                )
            )
            urls.append(f"clickhouse+http://default:@127.0.0.1:{http}/default")
        for (_, http, _), process, number in zip(ports, processes, range(shards)):
            ping = f"http://127.0.0.1:{http}/ping"
            _wait(
                lambda p=ping: urllib.request.urlopen(p, timeout=1).status == 200,
                f"ClickHouse shard {number}",
                60,
                [process],
                folder / f"clickhouse{number}" / "error.log",
            )
        SHARDS[urls[0]] = urls
        yield urls
    finally:
        SHARDS.pop(urls[0], None) if urls else None
        _stop(processes)


@contextmanager
def spark_cluster(folder: Path, workers: int = 2, memory: str = "1g") -> Iterator[str]:
    """Start a Spark standalone master, ``workers`` one-core workers and the Thrift server under
    ``folder``; yield the ``hive://`` SQLAlchemy URL of its default database."""
    home = SPARK_HOME
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(folder / "logs"),
        "SPARK_WORKER_DIR": str(folder / "work"),
        "SPARK_LOCAL_DIRS": str(folder / "local"),
    }
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    master_port, master_ui, thrift = free_port(), free_port(), free_port()
    master = f"spark://127.0.0.1:{master_port}"
    log = folder / "spark.log"
    spark_class = [str(home / "bin" / "spark-class")]
    processes: list[subprocess.Popen] = []
    try:
        processes.append(
            _start(
                [*spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(master_port), "--webui-port", str(master_ui)],
                log,
                env,
            )
        )
        for _ in range(workers):  # each kept as it starts: stopped below if a later one fails
            processes.append(  # noqa: PERF401
                _start(
                    [*spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                     "--cores", "1", "--memory", memory, "--webui-port", str(free_port()),
                     master],
                    log,
                    env,
                )
            )
        warehouse = folder / "warehouse"
        conf = {
            "spark.sql.warehouse.dir": str(warehouse),
            "spark.sql.shuffle.partitions": "4",
            "spark.sql.session.timeZone": "UTC",
            # Rows are sent a partition at a time: collected whole, 10M rows (memory mode) ran
            # the 1 GB driver out of heap and left the statement waiting for ever.
            "spark.sql.thriftServer.incrementalCollect": "true",
            "spark.driver.memory": "1g",
            "spark.executor.memory": memory,
            "spark.ui.enabled": "false",
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={folder / 'derby'}",
        }
        processes.append(
            _start(
                [str(home / "bin" / "spark-submit"), "--master", master,
                 "--class", "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2",
                 *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")],
                 "--hiveconf", f"hive.server2.thrift.port={thrift}",
                 "--hiveconf", "hive.server2.thrift.bind.host=127.0.0.1",
                 "spark-internal"],
                log,
                {**env, "SPARK_SUBMIT_OPTS": f"-Duser.dir={folder}"},
            )
        )
        url = f"hive://127.0.0.1:{thrift}/default"

        # thrift logs each refused connection as an error: not while the server is starting.
        logging.getLogger("thrift.transport.TSocket").setLevel(logging.CRITICAL)

        def ready() -> bool:
            from pyhive import hive

            with hive.connect("127.0.0.1", port=thrift) as connection:
                cursor = connection.cursor()
                cursor.execute("SELECT 1")
                return cursor.fetchall() == [(1,)]

        _wait(ready, "Spark Thrift server", 240, processes, log)
        logging.getLogger("thrift.transport.TSocket").setLevel(logging.NOTSET)
        yield url
    finally:
        _stop(processes)


# Generic SQLAlchemy types as (ClickHouse, Spark) column types, most specific first.
ENGINE_TYPES = [
    (Boolean, "UInt8", "BOOLEAN"),
    (BigInteger, "Int64", "BIGINT"),
    (Integer, "Int32", "INT"),
    (Float, "Float64", "DOUBLE"),
    (Numeric, "Decimal(18, 6)", "DECIMAL(18, 6)"),
    (DateTime, "DateTime", "TIMESTAMP"),
    (Date, "Date", "DATE"),
    (String, "String", "STRING"),
    (Uuid, "UUID", "STRING"),  # Spark SQL has no UUID type
]
# The ClickHouse shard URLs behind each cluster's first server (where Distributed tables live).
SHARDS: dict[str, list[str]] = {}


def _engine_type(kind, dialect: str) -> str:
    for generic, clickhouse, spark in ENGINE_TYPES:
        if isinstance(kind, generic):
            return f"Nullable({clickhouse})" if dialect == "clickhouse" else spark
    raise TypeError(f"no {dialect} type for {kind!r}")


def _literal(value, dialect: str) -> str:
    """A SQL literal of a Python value (strings with backslash escapes, as both engines read)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return ("1" if value else "0") if dialect == "clickhouse" else str(value).upper()
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, datetime):
        if dialect == "clickhouse":
            return f"toDateTime('{value.strftime('%Y-%m-%d %H:%M:%S')}')"
        return f"TIMESTAMP '{value.strftime('%Y-%m-%d %H:%M:%S.%f')}'"
    if isinstance(value, date):
        return f"toDate('{value}')" if dialect == "clickhouse" else f"DATE '{value}'"
    escaped = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def _values(rows: list[dict], names: list[str], dialect: str) -> str:
    return ", ".join(
        "(" + ", ".join(_literal(row.get(n), dialect) for n in names) + ")" for row in rows
    )


def source_table(engine, table: Table, rows: list[dict]):
    """(Re)create ``table`` on ``engine`` and insert ``rows``: SQLAlchemy's own DDL on the
    databases it writes to; on ClickHouse a local table per shard and a Distributed table over
    them on the first server (rows dealt to the shards in turn); on Spark a Parquet table."""
    dialect = engine.dialect.name
    if dialect not in {"clickhouse", "hive"}:
        table.drop(engine, checkfirst=True)
        table.create(engine)
        if rows:
            with engine.begin() as connection:
                connection.execute(table.insert(), rows)
        return
    names = [c.name for c in table.columns]
    quote = "`"
    columns = ", ".join(f"{quote}{c.name}{quote} {_engine_type(c.type, dialect)}" for c in table.columns)
    if dialect == "hive":
        with engine.connect() as connection:
            connection.execute(text(f"DROP TABLE IF EXISTS {table.name}"))
            connection.execute(text(f"CREATE TABLE {table.name} ({columns}) USING parquet"))
            if rows:
                connection.execute(
                    text(f"INSERT INTO {table.name} VALUES {_values(rows, names, dialect)}")
                )
        return
    from sqlalchemy import create_engine

    shards = SHARDS[engine.url.render_as_string(hide_password=False)]
    local = f"{table.name}_local"
    for number, url in enumerate(shards):
        shard = create_engine(url)
        with shard.connect() as connection:
            connection.execute(text(f"DROP TABLE IF EXISTS {local}"))
            connection.execute(
                text(f"CREATE TABLE {local} ({columns}) ENGINE = MergeTree() ORDER BY tuple()")
            )
            dealt = rows[number :: len(shards)]
            if dealt:
                connection.execute(text(f"INSERT INTO {local} VALUES {_values(dealt, names, dialect)}"))
        shard.dispose()
    with engine.connect() as connection:
        connection.execute(text(f"DROP TABLE IF EXISTS {table.name}"))
        connection.execute(
            text(
                f"CREATE TABLE {table.name} ({columns}) "
                f"ENGINE = Distributed({CLUSTER}, default, {local}, rand())"
            )
        )
