"""The scans on distributed engines: ClickHouse (two shards behind a Distributed table) and Spark
SQL (standalone master, two one-core workers, Thrift server), each started privately by
tests/clusters.py, with the predictions generated inside the engine. Spark's table is by default
laid out as a warehouse keeps predictions: Parquet partitioned by model, timestamps as INT64
microseconds (``--spark-layout plain``: unpartitioned, Spark's default INT96 timestamps, which
cost the push-down more: 1.69x the floor against 1.36x in one run). The floor and every
scan read the same table.

For each engine, in one run: the engine's own bare GROUP BY over the cells' columns (the floor),
the push-down as configured by default (it runs the duplicate-id scan, as neither engine declares
unique keys), the push-down with ``scan.ids_unique`` declared, the duplicate-id scan alone, and the
memory mode (optional: it moves every row into Python). The scans run in ``--repeat`` rounds after
one untimed bare GROUP BY, each round every scan once, each right after a bare GROUP BY; a scan's
ratio is the median over rounds of its time over the floor timed just before it (memory: one run,
against a floor timed right after it). ClickHouse's shards are merged (OPTIMIZE ... FINAL) after
loading, as a table at rest is.

    .venv/bin/python benchmarks/engines.py --rows 10000000 --engines clickhouse,spark --memory
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.exc import SQLAlchemyError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from biasaudit.db.engine import make_engine
from biasaudit.db.sources.cells import duplicated_ids
from biasaudit.db.sources.scan import memory_cells, pushdown_cells
from biasaudit.db.sources.window import window_of
from biasaudit.schemas.config import parse_config
from tests.clusters import CLUSTER, SHARDS, clickhouse_cluster, spark_cluster

NOW = datetime(2026, 6, 1, tzinfo=UTC)
COLUMNS = "pid, model, made, label, pred, race, sex"
BARE = "SELECT race, sex, label, pred, count(*) FROM bench GROUP BY race, sex, label, pred"


def audit(ids_unique: bool):
    return parse_config(
        {
            "audits": [
                {
                    "name": "bench",
                    "model": "m",
                    "source": "bench",
                    "attributes": ["race", "sex"],
                    "columns": {
                        "prediction_id": "pid",
                        "model_id": "model",
                        "predicted_at": "made",
                        "y_true": "label",
                        "y_pred": "pred",
                    },
                    "scan": {"mode": "pushdown", "ids_unique": ids_unique},
                }
            ]
        }
    ).audits[0]


def prepare_clickhouse(url: str, rows: int):
    """Per shard a MergeTree table of half the rows (ids interleaved), a Distributed table over
    them: 10% unlabelled, four races, two sexes, timestamps over 58 days."""
    shards = SHARDS[url]
    schema = (
        "pid Int64, model String, made DateTime, label Nullable(UInt8), pred UInt8, "
        "race String, sex String"
    )
    for number, shard_url in enumerate(shards):
        shard = create_engine(shard_url)
        with shard.connect() as connection:
            connection.execute(text("DROP TABLE IF EXISTS bench_local"))
            connection.execute(
                text(f"CREATE TABLE bench_local ({schema}) ENGINE = MergeTree() ORDER BY tuple()")
            )
            n = len(shards)
            connection.execute(
                text(
                    f"INSERT INTO bench_local SELECT toInt64(number * {n} + {number}), 'm', "
                    "toDateTime('2026-01-01 00:00:00') + (number % 5000000), "
                    "if(number % 10 = 0, NULL, toUInt8(number % 2)), "
                    "toUInt8(intHash32(number) % 2), ['a', 'b', 'c', 'd'][number % 4 + 1], "
                    f"['F', 'M'][intHash32(number + 1) % 2 + 1] FROM numbers({rows // n})"
                )
            )
            # A table at rest: its parts merged now, not by background merges while timed.
            connection.execute(text("OPTIMIZE TABLE bench_local FINAL"))
        shard.dispose()
    with create_engine(url).connect() as connection:
        connection.execute(text("DROP TABLE IF EXISTS bench"))
        connection.execute(
            text(f"CREATE TABLE bench ({schema}) ENGINE = Distributed({CLUSTER}, default, bench_local, rand())")
        )


def prepare_spark(url: str, rows: int, layout: str = "warehouse"):
    """A Parquet table of the same shape, written by Spark itself. ``warehouse`` (the default):
    partitioned by model and with timestamps as INT64 microseconds (TIMESTAMP_MICROS, the
    Parquet format's timestamp type, which Iceberg writes), as a table of several models'
    predictions is kept; ``plain``: one unpartitioned table with Spark's default INT96
    timestamps (a type the Parquet format deprecates). The floor and the scans read the same
    table."""
    columns = (
        "id AS pid, timestamp_seconds(1767225600 + id % 5000000) AS made, "
        "CASE WHEN id % 10 = 0 THEN NULL ELSE CAST(id % 2 AS INT) END AS label, "
        "CAST(hash(id) & 1 AS INT) AS pred, "
        "element_at(array('a', 'b', 'c', 'd'), CAST(id % 4 + 1 AS INT)) AS race, "
        "CASE WHEN hash(id + 1) & 1 = 0 THEN 'F' ELSE 'M' END AS sex, 'm' AS model"
    )
    warehouse = layout == "warehouse"
    stamps = "TIMESTAMP_MICROS" if warehouse else "INT96"
    with create_engine(url).connect() as connection:
        connection.execute(text("DROP TABLE IF EXISTS bench"))
        connection.execute(text(f"SET spark.sql.parquet.outputTimestampType={stamps}"))
        connection.execute(
            text(
                "CREATE TABLE bench USING parquet "
                + ("PARTITIONED BY (model) " if warehouse else "")
                + f"AS SELECT {columns} FROM range({rows})"
            )
        )


def timed(call) -> tuple[float, object]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def measure(name: str, url: str, repeat: int, memory: bool) -> list[tuple[str, ...]]:
    """For ``repeat`` rounds, each scan right after a bare GROUP BY: a scan's ratio is the median
    over rounds of its time over the floor timed just before it, so that a change of the
    machine's load, or the state a heavy scan leaves (ClickHouse returning the memory of the
    duplicate scan's hash table), reaches the floor and the scan alike."""
    engine = make_engine(url)

    def bare():
        with engine.connect() as connection:
            return connection.execute(text(BARE)).all()

    def duplicates():
        with engine.connect() as connection:
            window = window_of(connection, audit(False))
            return duplicated_ids(connection, window, None, NOW, NOW)

    scans = {
        "bare GROUP BY": bare,  # after a bare GROUP BY too: its ratio is the floor's own spread
        "duplicate-id scan alone": duplicates,
        "push-down (duplicate scan)": lambda: pushdown_cells(engine, audit(False), None, NOW, NOW),
        "push-down, ids_unique": lambda: pushdown_cells(engine, audit(True), None, NOW, NOW),
    }
    bare()  # not timed: an engine's first jobs include its warm-up (Spark's JIT, caches)
    times: dict[str, list[float]] = {label: [] for label in scans}
    floors: dict[str, list[float]] = {label: [] for label in scans}
    results: dict[str, object] = {}
    for _ in range(repeat):
        for label, call in scans.items():
            floor, _ = timed(bare)
            seconds, results[label] = timed(call)
            floors[label].append(floor)
            times[label].append(seconds)
    figures = []
    for label, seconds in times.items():
        result = results[label]
        if hasattr(result, "rows_valid"):
            detail = f"{result.rows_valid:,} valid"
        else:
            detail = f"{len(result)} {'cells' if label == 'bare GROUP BY' else 'repeated ids'}"
        ratio = statistics.median(t / f for t, f in zip(seconds, floors[label]))
        spread = f"{min(seconds):.2f}-{max(seconds):.2f} s"
        figures.append((name, label, f"{statistics.median(seconds):.2f} s", spread, f"{ratio:.2f}x", detail))
    print("\n".join(" | ".join(row) for row in figures), flush=True)
    if memory:
        try:
            seconds, result = timed(lambda: memory_cells(engine, audit(False), None, NOW, NOW))
            floor, _ = timed(bare)
            detail = f"{result.rows_valid:,} valid"
        except SQLAlchemyError as exc:  # report what the engine or driver did, not a traceback
            seconds, floor, detail = float("nan"), float("nan"), f"failed: {type(exc).__name__}: {str(exc)[:120]}"
        figures.append((name, "memory mode (one run)", f"{seconds:.2f} s", "", f"{seconds / floor:.1f}x", detail))
        print(" | ".join(figures[-1]), flush=True)
    engine.dispose()
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--engines", default="clickhouse,spark")
    parser.add_argument("--repeat", type=int, default=7, help="rounds")
    parser.add_argument("--memory", action="store_true", help="also the memory mode (slow)")
    parser.add_argument(
        "--spark-layout",
        choices=["warehouse", "plain"],
        default="warehouse",
        help="Spark's table: partitioned by model, INT64 timestamps; or plain, INT96",
    )
    args = parser.parse_args()
    figures = []
    with tempfile.TemporaryDirectory(prefix="biasaudit-engines-") as folder, ExitStack() as stack:
        for name in args.engines.split(","):
            start = time.perf_counter()
            if name == "clickhouse":
                url = stack.enter_context(clickhouse_cluster(Path(folder) / name))[0]
                up = time.perf_counter() - start
                prepare_clickhouse(url, args.rows)
            else:
                (Path(folder) / name).mkdir()
                url = stack.enter_context(spark_cluster(Path(folder) / name, memory="2g"))
                up = time.perf_counter() - start
                prepare_spark(url, args.rows, args.spark_layout)
            loaded = time.perf_counter() - start - up
            print(f"{name}: up in {up:.1f} s, {args.rows:,} rows written in {loaded:.1f} s", flush=True)
            figures += measure(name, url, args.repeat, args.memory)
    print("\n| engine | scan | median | range | vs bare (median of rounds) | result |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for row in figures:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
