"""Planning's exact power per pair of sizes: the tails as tasks.twosample.Probabilities chooses
them (a table, or the CDF where few edges fall in the larger group's bulk) against the binomial
CDF at every region edge (the table switched off), each the best of --repeat, the
caches cleared before every call, in one process. With --plain: only the time per pair, on
whatever code is imported (an older checkout first on PYTHONPATH, to compare versions).

    python benchmarks/planning_power.py
    PYTHONPATH=/tmp/basepath python benchmarks/planning_power.py --plain
"""

from __future__ import annotations

import argparse
import time

from biasaudit.tasks import twosample, twosample_power

PAIRS = [
    (50, 5_000),
    (239, 400),
    (809, 1_383),
    (1_254, 938),
    (400, 4_000),
    (999, 12_000),
    (150, 60_000),
    (300, 150_000),
    (156, 630_000),
    (500, 1_000_000),
    (999, 2_000_000),
]


def seconds(n_a: int, n_b: int) -> float:
    """exact_power at U_tol 0 and 0.05, levels 0.05 and 0.0003, caches cleared first."""
    for name in ("_nuisance_grid",):
        if hasattr(twosample, name):
            getattr(twosample, name).cache_clear()
    start = time.perf_counter()
    for u_tol in (0.0, 0.05):
        for level in (0.05, 0.0003):
            twosample_power.exact_power(n_a, n_b, 0.3 + u_tol, 0.25, u_tol, level)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--plain", action="store_true", help="time per pair only (any version)")
    args = parser.parse_args()
    if args.plain:
        print(f"{'group':>6} {'reference':>10} {'seconds':>8}")
        for n_a, n_b in PAIRS:
            print(f"{n_a:6d} {n_b:10d} {min(seconds(n_a, n_b) for _ in range(args.repeat)):8.3f}")
        return
    ratio = twosample._TABLE_RATIO
    print(f"{'group':>6} {'reference':>10} {'chosen':>11} {'CDF only':>9} {'gain':>6}")
    for n_a, n_b in PAIRS:
        twosample._TABLE_RATIO = ratio
        chosen = min(seconds(n_a, n_b) for _ in range(args.repeat))
        twosample._TABLE_RATIO = 0  # never a table
        cdf_only = min(seconds(n_a, n_b) for _ in range(args.repeat))
        twosample._TABLE_RATIO = ratio
        print(f"{n_a:6d} {n_b:10d} {chosen:10.3f}s {cdf_only:8.3f}s {cdf_only / chosen:5.2f}x")

if __name__ == "__main__":
    main()
