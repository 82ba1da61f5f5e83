"""Input fingerprint: its cost beside the stream scan, and what a row hash in the push-down's
GROUP BY would cost, on the scale benchmark's table (benchmarks/scale.py).

- stream: the stream scan (``scan_window``, 500k-row batches), best of 2; the row hash sums of
  the same typed batches (db.sources.fingerprints.row_hash_sum), and of that the mixing of each row's hash
  (pandas' hash_array), best of 5;
- pushdown: the push-down scan, best of 2; its GROUP BY alone and with a sum of one row hash of
  every column added (PostgreSQL: hash_record_extended mixed by hashint8extended; DuckDB: hash;
  MariaDB/MySQL: CRC32 of the values joined), best of 3, alternated twice.

    python benchmarks/fingerprint.py --db postgresql://postgres@127.0.0.1:5432/bench1m --prepare 1000000
    python benchmarks/fingerprint.py --db duckdb:////tmp/bench1m.duckdb --parts pushdown
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import Text, case, cast, func, select, tuple_

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import config_file, prepare

from biasaudit.db.engine import make_engine, one_snapshot
from biasaudit.db.sources.fingerprints import ROW_PRIME, column_hashes, row_hash_sum
from biasaudit.db.sources.scan import scan_window
from biasaudit.db.sources.stream import read_batches, typed_frame
from biasaudit.db.sources.window import window_bounds, window_of
from biasaudit.flows.config_files import load_audit

AS_OF = datetime(2026, 3, 1, tzinfo=UTC)


def best(work: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def row_hashes(frame: pd.DataFrame) -> np.ndarray:
    """Each row's column hashes combined, before mixing (as db.sources.fingerprints.row_hash_sum)."""
    rows = np.zeros(len(frame), dtype=np.uint64)
    for name in frame.columns:
        rows = rows * ROW_PRIME + column_hashes(frame[name])
    return rows


def stream(engine, folder: Path) -> None:
    audit = load_audit(config_file("stream", folder), "bench-stream")
    start, end = window_bounds(audit, AS_OF)
    scan = best(lambda: scan_window(engine, audit, start, end, AS_OF), 2)
    query = window_of(engine, audit).query(start, end, AS_OF)
    with one_snapshot(engine) as connection:
        frames = [typed_frame(chunk) for chunk in read_batches(connection, query, 500_000)]
    hashing = best(lambda: [row_hash_sum(f) for f in frames], 5)
    combined = [row_hashes(f) for f in frames]
    mixing = best(lambda: [pd.util.hash_array(r) for r in combined], 5)
    print(f"stream scan {scan:.2f} s; row hash sums {hashing:.3f} s, of which mixing "
          f"{mixing * 1000:.1f} ms ({100 * mixing / scan:.2f}% of the scan)", flush=True)


def row_hash(window, dialect: str):
    """One hash of every column of the row, by the database's own functions."""
    columns = list(window.table.c)
    if dialect == "postgresql":
        return func.hashint8extended(func.hash_record_extended(tuple_(*columns), 0), 0)
    if dialect == "duckdb":
        return func.hash(*columns)
    return func.crc32(func.concat_ws("|", *[func.coalesce(cast(c, Text), "\\N") for c in columns]))


def pushdown(engine, folder: Path) -> None:
    audit = load_audit(config_file("pushdown", folder), "bench-pushdown")
    start, end = window_bounds(audit, AS_OF)
    scan = best(lambda: scan_window(engine, audit, start, end, AS_OF), 2)
    names = [*audit.attributes, "y_true", "y_pred"]
    with engine.connect() as connection:
        window = window_of(connection, audit)
        keys = [window.key(n).label(f"k_{n}") for n in names]
        suspect = case((window.row_ok(AS_OF), 0), else_=1).label("suspect")
        hashed = row_hash(window, engine.dialect.name).label("h")

        def query(with_hash: bool):
            extra = [hashed] if with_hash else []
            inner = select(*keys, suspect, *extra).where(window.where(start, end, AS_OF)).subquery()
            grouping = [inner.c[f"k_{n}"] for n in names]
            sums = [func.sum(c) for c in inner.c if c.name in {"suspect", "h"}]
            return select(*grouping, func.count(), *sums).group_by(*grouping)

        for _ in range(2):
            bare = best(lambda: connection.execute(query(False)).all(), 3)
            more = best(lambda: connection.execute(query(True)).all(), 3)
            print(f"pushdown scan {scan:.2f} s; GROUP BY {bare:.2f} s, with a row hash "
                  f"{more:.2f} s (+{more - bare:.2f} s, {100 * (more - bare) / scan:+.0f}% of "
                  "the scan)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--prepare", type=int, help="first generate this many rows (scale.py)")
    parser.add_argument("--parts", default="stream,pushdown", help="comma-separated")
    args = parser.parse_args()
    if args.prepare:
        prepare(args.db, args.prepare)
    engine = make_engine(args.db)
    folder = Path(tempfile.mkdtemp())
    for part in args.parts.split(","):
        {"stream": stream, "pushdown": pushdown}[part](engine, folder)


if __name__ == "__main__":
    main()
