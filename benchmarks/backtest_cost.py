"""The monitor's backtest against one audit of the same rows: 30 nights of 60,000 predictions.

A SQLite source (or --db) holds 60,000 predictions a night for 30 nights (the monitor tests'
predictions: race a/b/c, c selected more often, 20% of labels missing); the audit is monitored
(label delay 2 days). Each case in one process, best of --repeat: ``backtest`` over the 30 nights
(flows.monitoring), one audit run of all the rows (flows.pipeline.run_audit, into a fresh store)
and the audit's scan alone (db.sources.scan.scan_window of the whole window).

    python benchmarks/backtest_cost.py [--nights 30] [--per-night 60000] [--repeat 2] [--db URL]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: its tests
from tests.test_monitor_db import predictions  # the monitor tests' nightly predictions

START = datetime(2026, 3, 1, tzinfo=UTC)
CONFIG = """[[audits]]
name = "mon"
model = "m"
window = "all"
attributes = ["race", "sex"]
intersections = [["race", "sex"]]
reference_groups = { race = "a" }
[audits.thresholds]
bootstrap_replicates = 100
[audits.monitor]
label_delay_days = 2
"""


def best(repeat: int, call) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--per-night", type=int, default=60_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--db", help="source database (default: a SQLite file)")
    args = parser.parse_args()
    from biasaudit.db.engine import make_engine
    from biasaudit.db.sources.scan import scan_window
    from biasaudit.db.store.load import load_predictions
    from biasaudit.db.store.migrate import upgrade
    from biasaudit.flows.config_files import load_config
    from biasaudit.flows.monitoring import backtest
    from biasaudit.flows.pipeline import run_audit

    work = Path(tempfile.mkdtemp())
    db_url = args.db or f"sqlite:///{work / 'source.db'}"
    frame = predictions(args.nights, args.per_night)
    upgrade(db_url)
    load_predictions(make_engine(db_url), frame, ["race", "sex"], "predictions")
    config = work / "audit.toml"
    config.write_text(CONFIG)
    audit = load_config(config).get("mon")
    nights = [START + timedelta(days=d) for d in range(1, args.nights + 1)]
    now = datetime.now(UTC)
    warnings.simplefilter("ignore")
    stores = []
    for i in range(args.repeat):  # migrated before the clock starts
        stores.append(f"sqlite:///{work / f'store{i}.db'}")
        upgrade(stores[-1])
    fresh = iter(stores)
    with_source = work / "audit_source.toml"  # the audit reads the same source database
    with_source.write_text(CONFIG.replace('window = "all"', f'window = "all"\nsource_db = "{db_url}"'))

    def one_audit():
        return run_audit("mon", str(with_source), next(fresh), nights[-1])

    seconds = {
        "backtest": best(args.repeat, lambda: backtest(db_url, audit, nights[0], nights[-1])),
        "one audit": best(args.repeat, one_audit),
        "scan": best(
            args.repeat,
            lambda: scan_window(make_engine(db_url), audit, None, nights[-1], now),
        ),
    }
    rows = len(frame)
    print(f"{args.nights} nights x {args.per_night:,} predictions ({rows:,} rows), {db_url.split(':')[0]}")
    print("| case | seconds | / one audit |")
    print("|---|---:|---:|")
    for name, value in seconds.items():
        print(f"| {name} | {value:.2f} | {value / seconds['one audit']:.2f} |")


if __name__ == "__main__":
    main()
