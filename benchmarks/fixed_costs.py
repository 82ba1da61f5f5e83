"""Fixed costs of one audit, apart from the scan: imports, statistics, persist and report.

Imports: the plain pipeline (``--plain``, default biasaudit.flows.pipeline) against the Prefect
flow module (``--flow``, biasaudit.flows.audit), each in fresh interpreters, median of 5.
Stages: counts of ~500 groups (attributes race 6, sex 2, age 8, region 5 values; intersections
race x sex, age x region and three 3-way ones: 489 groups, many of them small), the full metric
catalogue, B = 1,000 bootstrap replicates, through tasks.core.audit_counts (each stage timed into
its ``timings``), then persisted as the flow does (db.store.runs.start_run, db.store.results.result_tables,
db.store.runs.save_run) to SQLite and PostgreSQL, then the report (flows.report.build_report) on each.

    python benchmarks/fixed_costs.py [--postgres postgresql://postgres@127.0.0.1:5432/postgres]

To time an older checkout in the same run, put a folder holding a ``biasaudit`` link to it first
on PYTHONPATH and pass ``--plain biasaudit.flows.audit`` (the module that held run_audit then).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

LEVELS = {
    "race": list("ABCDEF"),
    "sex": ["F", "M"],
    "age": [f"a{i}" for i in range(8)],
    "region": [f"r{i}" for i in range(5)],
}
INTERSECTIONS = [
    ["race", "sex"],
    ["age", "region"],
    ["race", "sex", "age"],
    ["race", "age", "region"],
    ["sex", "age", "region"],
]
ROWS = 2_000_000


def import_seconds(module: str, repeats: int = 5) -> float:
    """Median wall time of ``import module`` in a fresh interpreter."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    runs = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], check=True, capture_output=True, text=True
            ).stdout
        )
        for _ in range(repeats)
    ]
    return statistics.median(runs)


def predictions(seed: int = 7) -> pd.DataFrame:
    """Pre-aggregated predictions (one row per attribute combination and confusion cell, with
    its count ``n``) of ROWS rows: skewed race shares, so the 3-way cells run from a handful to
    tens of thousands; 5% of outcomes unknown; rates differ by group."""
    rng = np.random.default_rng(seed)
    grid = pd.MultiIndex.from_product(LEVELS.values(), names=list(LEVELS)).to_frame(index=False)
    shares = np.ones(len(grid))
    for column, skew in (("race", 3.0), ("age", 1.5), ("region", 1.0)):
        codes = grid[column].map({v: i for i, v in enumerate(LEVELS[column])}).to_numpy()
        shares *= np.exp(-skew * codes / len(LEVELS[column]))
    sizes = rng.multinomial(ROWS, shares / shares.sum())
    prevalence = rng.uniform(0.2, 0.45, len(grid))
    selection = rng.uniform(0.25, 0.45, len(grid))
    rows = []
    for truth, pred in ((0, 0), (0, 1), (1, 0), (1, 1), (np.nan, 0), (np.nan, 1)):
        p_truth = 0.05 if np.isnan(truth) else 0.95 * (prevalence if truth else 1 - prevalence)
        p_pred = selection + (0.15 if truth == 1 else 0.0)
        rows.append(p_truth * (p_pred if pred else 1 - p_pred))
    probabilities = np.stack(rows, axis=1)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    cells = np.stack([rng.multinomial(n, p) for n, p in zip(sizes, probabilities)])
    frames = [
        grid.assign(y_true=truth, y_pred=pred, n=cells[:, i])
        for i, (truth, pred) in enumerate(
            ((0.0, 0), (0.0, 1), (1.0, 0), (1.0, 1), (np.nan, 0), (np.nan, 1))
        )
    ]
    frame = pd.concat(frames, ignore_index=True)
    return frame[frame["n"] > 0].reset_index(drop=True)


def persist_and_report(url: str, audit: Any, result: Any) -> tuple[float, float]:
    """Seconds to persist ``result`` as the flow does, and to build its report."""
    from biasaudit.db.engine import make_engine
    from biasaudit.db.store.migrate import upgrade
    from biasaudit.db.store.results import result_tables
    from biasaudit.db.store.runs import RunRecord, release_run, save_run, start_run
    from biasaudit.flows.report import build_report
    from biasaudit.schemas.quarantine import QUARANTINE_COLUMNS

    upgrade(url)
    engine = make_engine(url)
    now = datetime.now(UTC)
    record = RunRecord(
        audit_name=audit.name,
        model_id=audit.model_id,
        model_version=None,
        as_of=now,
        window_start=None,
        window_end=now,
        config=audit.model_dump(mode="json"),
        config_hash=audit.config_hash(),
        code_version="bench",
        started_at=now,
        input_fingerprint=uuid.uuid4().hex,
        summary=dict(result.summary),
    )
    run_id = start_run(engine, record)
    start = time.perf_counter()
    run_id = save_run(
        engine, run_id, record, result_tables(result.frames()), pd.DataFrame(columns=QUARANTINE_COLUMNS)
    ).run_id
    persist = time.perf_counter() - start
    release_run(run_id)
    start = time.perf_counter()
    build_report(engine, run_id)
    report = time.perf_counter() - start
    engine.dispose()
    return persist, report


def postgres_database(admin_url: str, name: str, create: bool) -> str:
    """Create (or drop) a throw-away database next to ``admin_url``; returns its URL."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from biasaudit.db.engine import parse_url

    admin = create_engine(parse_url(admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        if create:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        else:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plain", default="biasaudit.flows.pipeline")
    parser.add_argument("--flow", default="biasaudit.flows.audit")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--no-imports", action="store_true", help="skip the import timings")
    args = parser.parse_args()
    if not args.no_imports:
        for label, module in (("plain pipeline", args.plain), ("flow module", args.flow)):
            print(f"import {module} ({label}): {import_seconds(module):.2f} s (median of 5)")

    from biasaudit.schemas.config import audit_from_options
    from biasaudit.tasks.core import audit_counts
    from biasaudit.tasks.counts import group_counts

    audit = audit_from_options(
        attributes=list(LEVELS),
        intersections=INTERSECTIONS,
        reference_groups={"race": "A", "sex": "M", "age": "a0", "region": "r0"},
        bootstrap_replicates=1000,
        name="fixed-costs",
        model_id="bench",
    )
    cells = predictions()
    timings: dict[str, float] = {}
    start = time.perf_counter()
    counts = group_counts(cells, audit.attributes, audit.intersections)
    timings["counts"] = time.perf_counter() - start
    start = time.perf_counter()
    result = audit_counts(counts, audit, timings=timings)
    core = time.perf_counter() - start
    timings["core: validation and summary"] = core - sum(
        v for k, v in timings.items() if k != "counts"
    )
    groups = int((counts["subset"] == "group").sum())
    print(
        f"\n{groups} groups, {len(result.planning)} comparison rows, "
        f"{int(result.planning['power_method'].eq('exact').sum())} with exact power"
    )
    with tempfile.TemporaryDirectory() as folder:
        timings["persist SQLite"], timings["report SQLite"] = persist_and_report(
            f"sqlite:///{Path(folder) / 'fixed.db'}", audit, result
        )
    name = f"fixed_costs_{uuid.uuid4().hex[:8]}"
    url = postgres_database(args.postgres, name, create=True)
    try:
        timings["persist PostgreSQL"], timings["report PostgreSQL"] = persist_and_report(
            url, audit, result
        )
    finally:
        postgres_database(args.postgres, name, create=False)
    for stage, seconds in timings.items():
        print(f"{stage:32s} {seconds:8.3f} s")
    statistics_total = timings["counts"] + core
    for store in ("SQLite", "PostgreSQL"):
        total = statistics_total + timings[f"persist {store}"] + timings[f"report {store}"]
        print(f"{'total (' + store + ')':32s} {total:8.3f} s")


if __name__ == "__main__":
    main()
