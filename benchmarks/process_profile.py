"""Where one audit process's time goes, stage by stage, on the scale benchmark's table.

A fresh interpreter times its imports of the plain pipeline (first the libraries alone:
pandas, Pandera, psycopg, scipy.stats, SQLAlchemy's ORM), then runs the whole audit
(flows.pipeline.execute_audit) with a ``run`` hook that times every step (begin, scan, counts,
previous run, persist, report) and, from the run's stored timings, each statistical stage of
tasks.core; then the database's
floor (scale.py's bare GROUP BY, best of 3). Then persist alone, its
rows through COPY (PostgreSQL with psycopg 3, db.store.runs._insert_results) against one Core
executemany, alternated --repeat times in this process.

    python benchmarks/process_profile.py --rows 10000000 --db postgresql://postgres@127.0.0.1:5432/bench10m
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROCESS = """
import sys, time
start = time.perf_counter()
import pandas, pandera.pandas, psycopg, scipy.stats, sqlalchemy.orm
libraries = time.perf_counter() - start
from biasaudit.flows.pipeline import execute_audit
from biasaudit.flows.pipeline import call
imported = time.perf_counter() - start
sys.path.insert(0, sys.argv[3])
from scale import AS_OF
stages = {}
def timed(name, function, *args, **kwargs):
    begun = time.perf_counter()
    try:
        return call(name, function, *args, **kwargs)
    finally:
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - begun
begun = time.perf_counter()
outcome = execute_audit("bench-pushdown", sys.argv[2], sys.argv[1], AS_OF, True, run=timed)
total = time.perf_counter() - begun
print(f"{'imports':20} {imported:8.3f} s, of which the libraries {libraries:.3f} s")
from biasaudit.db.engine import make_engine
from biasaudit.db.store.history import get_run
stored = get_run(make_engine(sys.argv[1]), outcome["run_id"]).timings  # the core's stages too
for name, seconds in {**stages, **{k: v for k, v in stored.items() if k not in stages}}.items():
    print(f"{name:20} {seconds:8.3f} s")
print(f"{'all stages':20} {total:8.3f} s")
print(f"{'process':20} {time.perf_counter() - start:8.3f} s")
"""


def persist_seconds(url: str, config: Path, repeat: int) -> None:
    """Persist of the audit's results: COPY against executemany, alternated; best and median."""
    from datetime import UTC, datetime

    from scale import AS_OF

    from biasaudit.db.engine import make_engine
    from biasaudit.db.store import runs
    from biasaudit.db.store.results import result_tables
    from biasaudit.flows.config_files import load_audit
    from biasaudit.flows.pipeline import new_record, scan
    from biasaudit.tasks.core import audit_counts
    from biasaudit.tasks.counts import group_counts

    audit = load_audit(config, "bench-pushdown")
    record = new_record(audit, AS_OF)
    scanned = scan(url, audit, record.window_start, record.window_end, datetime.now(UTC))
    counts = group_counts(scanned.cells, audit.attributes, audit.intersections)
    tables = result_tables(audit_counts(counts, audit).frames())
    engine = make_engine(url)
    copy = runs._insert_results

    def executemany(connection, table, frame, run_id):
        connection.execute(runs.insert(table), runs._records(frame, run_id))

    times: dict[str, list[float]] = {"COPY (PostgreSQL) or executemany": [], "executemany": []}
    for _ in range(repeat):
        for name, insert in zip(times, (copy, executemany)):
            runs._insert_results = insert
            run_id = runs.start_run(engine, record)
            start = time.perf_counter()
            runs.save_run(engine, run_id, record, tables, scanned.quarantine, force=True)
            times[name].append(time.perf_counter() - start)
            runs.release_run(run_id)
    runs._insert_results = copy
    print(f"persist of {sum(len(frame) for frame in tables.values()):,} result rows:")
    for name, seconds in times.items():
        ordered = sorted(seconds)
        print(f"  {name:34} best {ordered[0]:.3f} s, median {ordered[len(ordered) // 2]:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--db", default="postgresql://postgres@127.0.0.1:5432/bench1m")
    parser.add_argument("--repeat", type=int, default=4)
    args = parser.parse_args()
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    from scale import config_file, floor_seconds, prepare

    prepare(args.db, args.rows)
    folder = Path(tempfile.mkdtemp(prefix="biasaudit-profile-"))
    config = config_file("pushdown", folder)
    done = subprocess.run(
        [sys.executable, "-c", PROCESS, args.db, str(config), str(here)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode:
        sys.exit(done.stderr[-3000:])
    print("\n".join(line for line in done.stdout.splitlines() if not line.startswith(("audit ", "  "))))
    print(f"{'floor (GROUP BY)':20} {min(floor_seconds(args.db) for _ in range(3)):8.3f} s, best of 3")
    persist_seconds(args.db, config, args.repeat)


if __name__ == "__main__":
    main()
