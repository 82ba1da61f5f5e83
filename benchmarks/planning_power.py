"""Planning's exact power per pair of sizes: the tail table (tasks.twosample._grid_tails) against
the binomial CDF at every region edge (the table switched off), each the best of --repeat, the
caches cleared before every call, in one process.

    python benchmarks/planning_power.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from biasaudit.tasks import twosample

PAIRS = [
    (50, 5_000),
    (400, 4_000),
    (999, 12_000),
    (150, 60_000),
    (300, 150_000),
    (156, 630_000),
    (500, 1_000_000),
    (999, 2_000_000),
]


def seconds(n_a: int, n_b: int) -> float:
    for cached in (twosample._grid_tails, twosample._grid_pmf, twosample.critical_statistic):
        cached.cache_clear()
    start = time.perf_counter()
    twosample.exact_power(n_a, n_b, 0.3, 0.28, 0.0, 0.05)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    ratio = twosample._TABLE_RATIO
    print(f"{'group':>6} {'reference':>10} {'table':>7} {'with table':>11} {'CDF only':>9} {'gain':>6}")
    for n_a, n_b in PAIRS:
        twosample._TABLE_RATIO = ratio
        with_table = min(seconds(n_a, n_b) for _ in range(args.repeat))
        used = twosample._grid_tails(n_a, n_b, True, 0.0) is not None
        twosample._TABLE_RATIO = 0
        cdf_only = min(seconds(n_a, n_b) for _ in range(args.repeat))
        width = min(n_b + 1, 2 * int(np.ceil(twosample._SPREAD * np.sqrt(n_b))) + 1)
        print(
            f"{n_a:6d} {n_b:10d} {width if used else 'none':>7} {with_table:10.3f}s "
            f"{cdf_only:8.3f}s {cdf_only / with_table:5.2f}x"
        )


if __name__ == "__main__":
    main()
