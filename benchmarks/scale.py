"""End-to-end audit time and peak memory at scale, against the database's own GROUP BY floor.

Generates N predictions in the database (3 sensitive attributes: race 6 groups, sex 2, age 8;
96 intersectional groups; the prediction id is the table's primary key, as in production), then audits them with the full metric catalogue and B = 1,000 in each
scan mode, each in a fresh process (wall time and peak RSS), beside the floor: one GROUP BY scan of
the same table, measured in the same run. Optionally: Fairlearn's MetricFrame on the same data in
memory, and the Prefect overhead (the same audit as a flow and as plain calls).

    python benchmarks/scale.py --rows 1000000 --db sqlite:///bench.db [--modes stream,pushdown]
    python benchmarks/scale.py --rows 10000000 --db postgresql://postgres@127.0.0.1:5432/bench
    python benchmarks/scale.py --rows 10000000 --fairlearn      # in memory, no database
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from biasaudit.db.engine import make_engine
from biasaudit.db.migrate import upgrade
from sqlalchemy import text
from sqlalchemy.engine import make_url

TABLE = "bench_predictions"
RACES, SEXES, AGES = list("ABCDEF"), ["F", "M"], [f"a{i}" for i in range(8)]

POSTGRES_FILL = f"""
INSERT INTO {TABLE}
SELECT 'p' || g, 'm', timestamptz '2026-01-01' + (g % 2592000) * interval '1 second',
       CASE WHEN random() < 0.05 THEN NULL ELSE (random() < 0.3)::int END,
       (random() < 0.35)::int, random(),
       (ARRAY['A','B','C','D','E','F'])[1 + floor(power(random(), 2) * 6)::int],
       (ARRAY['F','M'])[1 + floor(random() * 2)::int],
       'a' || floor(random() * 8)::int
FROM generate_series(1, :n) AS g
"""
SQLITE_FILL = f"""
WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n)
INSERT INTO {TABLE}
SELECT 'p' || g, 'm', datetime('2026-01-01', '+' || (g % 2592000) || ' seconds'),
       CASE WHEN abs(random()) % 100 < 5 THEN NULL ELSE abs(random()) % 10 < 3 END,
       abs(random()) % 100 < 35, (abs(random()) % 1000000) / 1000000.0,
       substr('AAAAAAAAABBBBBCCCDDEF', 1 + abs(random()) % 21, 1),
       substr('FM', 1 + abs(random()) % 2, 1),
       'a' || (abs(random()) % 8)
FROM s
"""
FLOOR = f"SELECT race, sex, age, label, pred, count(*) FROM {TABLE} WHERE model = 'm' GROUP BY race, sex, age, label, pred"


def prepare(url: str, rows: int, keyed: bool = True) -> None:
    """Create the audit tables and a source table of exactly ``rows`` predictions (the prediction
    id its primary key unless ``keyed`` is false: then every scan also checks ids for repeats)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        admin = make_engine(parsed.set(database="postgres").render_as_string(hide_password=False))
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            exists = connection.scalar(
                text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": parsed.database}
            )
            if not exists:
                connection.execute(text(f'CREATE DATABASE "{parsed.database}"'))
    upgrade(url)
    engine = make_engine(url)
    postgres = engine.dialect.name == "postgresql"
    with engine.begin() as connection:
        current = (
            connection.execute(text(f"SELECT count(*) FROM {TABLE}")).scalar()
            if _exists(connection)
            else None
        )
        if current == rows and _keyed(connection) == keyed:
            return
        connection.execute(text(f"DROP TABLE IF EXISTS {TABLE}"))
        timestamp = "timestamptz" if postgres else "timestamp"
        connection.execute(
            text(
                f"CREATE TABLE {TABLE} (pid text{' PRIMARY KEY' if keyed else ''}, model text, "
                f"at {timestamp}, label smallint, "
                "pred smallint, score real, race text, sex text, age text)"
            )
        )
        start = time.perf_counter()
        connection.execute(text(POSTGRES_FILL if postgres else SQLITE_FILL), {"n": rows})
        print(f"generated {rows:,} rows in {time.perf_counter() - start:.0f} s", flush=True)
    if postgres:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text(f"VACUUM ANALYZE {TABLE}"))


def _keyed(connection) -> bool:
    """A production table keys its prediction ids; the scan then needs no duplicate check."""
    from sqlalchemy import inspect

    return inspect(connection).get_pk_constraint(TABLE).get("constrained_columns") == ["pid"]


def _exists(connection) -> bool:
    from sqlalchemy import inspect

    return inspect(connection).has_table(TABLE)


def config_file(mode: str, folder: Path, chunk_rows: int = 500_000) -> Path:
    path = folder / f"bench-{mode}.toml"
    path.write_text(
        f'[[audits]]\nname = "bench-{mode}"\nmodel = "m"\nsource = "{TABLE}"\n'
        'attributes = ["race", "sex", "age"]\nintersections = [["race", "sex", "age"]]\n'
        'columns = { prediction_id = "pid", model_id = "model", predicted_at = "at", '
        'y_true = "label", y_pred = "pred" }\n'
        f'[audits.scan]\nmode = "{mode}"\nchunk_rows = {chunk_rows}\n'
        "[audits.thresholds]\nbootstrap_replicates = 1000\n"
    )
    return path


CHILD = """
import json, resource, sys, time
from datetime import datetime, UTC
start = time.perf_counter()
from biasaudit.flows.audit import run_audit, audit_flow
url, config, audit, how = sys.argv[1:5]
as_of = datetime(2026, 3, 1, tzinfo=UTC)
timings = {}
if how == "prefect":
    audit_flow(audit, config, url, as_of, True)          # includes the local server's start-up
    flow, plain = [], []
    for _ in range(3):                                   # alternate, then take medians
        t = time.perf_counter(); audit_flow(audit, config, url, as_of, True); flow.append(time.perf_counter() - t)
        t = time.perf_counter(); run_audit(audit, config, url, as_of, True); plain.append(time.perf_counter() - t)
    timings["flow"], timings["plain"] = sorted(flow)[1], sorted(plain)[1]
else:
    run_audit(audit, config, url, as_of, True)
timings["total"] = time.perf_counter() - start
timings["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("RESULT " + json.dumps(timings))
"""


def child(url: str, config: Path, audit: str, how: str = "plain") -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(config), audit, how],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(lines[-1][7:])


def floor_seconds(url: str) -> float:
    engine = make_engine(url)
    with engine.connect() as connection:
        start = time.perf_counter()
        connection.execute(text(FLOOR)).all()
        return time.perf_counter() - start


def fairlearn_comparison(rows: int) -> None:
    """Per-group metrics of the same N predictions in memory: Fairlearn's MetricFrame vs ours."""
    from biasaudit.tasks.counts import group_counts
    from biasaudit.tasks.metrics import compute_metrics
    from fairlearn.metrics import (
        MetricFrame,
        false_positive_rate,
        selection_rate,
        true_positive_rate,
    )

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "race": rng.choice(RACES, rows, p=[0.31, 0.25, 0.19, 0.14, 0.08, 0.03]),
            "sex": rng.choice(SEXES, rows),
            "age": rng.choice(AGES, rows),
            "y_true": (rng.random(rows) < 0.3).astype("int8"),
            "y_pred": (rng.random(rows) < 0.35).astype("int8"),
        }
    )
    metrics = {"tpr": true_positive_rate, "fpr": false_positive_rate, "ppr": selection_rate}
    start = time.perf_counter()
    _ = MetricFrame(
        metrics=metrics,
        y_true=frame["y_true"],
        y_pred=frame["y_pred"],
        sensitive_features=frame[["race", "sex", "age"]],
    ).by_group
    theirs = time.perf_counter() - start
    start = time.perf_counter()
    counts = group_counts(
        frame.assign(y_true=frame["y_true"].astype(float)),
        ["race", "sex", "age"],
        [["race", "sex", "age"]],
    )
    compute_metrics(counts, ["tpr", "fpr", "ppr"])
    ours = time.perf_counter() - start
    print(
        f"\n| {rows:,} rows in memory | seconds |\n|---|---|\n"
        f"| Fairlearn MetricFrame (tpr, fpr, ppr by race x sex x age) | {theirs:.2f} |\n"
        f"| biasaudit counts + metrics (each attribute, the intersection, complements) | {ours:.2f} |\n"
        f"| ratio | {theirs / ours:.1f}x |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--db", default="sqlite:///bench.db")
    parser.add_argument("--modes", default="stream,pushdown")
    parser.add_argument("--prefect", action="store_true", help="also measure the Prefect overhead")
    parser.add_argument("--no-key", action="store_true", help="no primary key on the prediction id")
    parser.add_argument("--chunk-rows", type=int, default=500_000, help="rows per streamed chunk")
    parser.add_argument("--fairlearn", action="store_true", help="only the MetricFrame comparison")
    args = parser.parse_args()
    if args.fairlearn:
        fairlearn_comparison(args.rows)
        return
    prepare(args.db, args.rows, keyed=not args.no_key)
    folder = Path(tempfile.mkdtemp())
    rows = []
    for mode in args.modes.split(","):
        floor = floor_seconds(args.db)
        result = child(args.db, config_file(mode, folder, args.chunk_rows), f"bench-{mode}")
        rows.append(
            {
                "mode": mode,
                "audit s": result["total"],
                "floor s": floor,
                "ratio": result["total"] / floor,
                "peak RSS MB": result["peak_rss_mb"],
            }
        )
        print(rows[-1], flush=True)
    backend = make_url(args.db).get_backend_name()
    key = "no key on the prediction id" if args.no_key else "prediction id as primary key"
    print(f"\n{args.rows:,} rows on {backend} ({key}):\n")
    print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".2f"))
    if args.prefect:
        result = child(args.db, config_file("pushdown", folder), "bench-pushdown", "prefect")
        print(
            f"\nPrefect overhead (pushdown audit, {args.rows:,} rows; medians of 3 alternating runs): "
            f"flow {result['flow']:.2f} s, "
            f"plain calls {result['plain']:.2f} s, difference {result['flow'] - result['plain']:.2f} s"
        )


if __name__ == "__main__":
    main()
