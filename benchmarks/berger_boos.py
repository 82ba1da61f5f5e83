"""Size, power and continuity of detection's two-sample test (tasks.twosample), with whatever
code is imported (an older checkout first on PYTHONPATH for "before"):

1. power against a growing reference: a group of 375 positives at TPR 0.55 against a reference
   at 0.70 with 1,125 / 4,500 / 45,000 positives, tolerance 0.05, level 0.0007: planning's
   exact power, the normal-theory power and the rejection rate of the test on simulated audits;
2. size at large, very unequal n: rejection rate at α = 0.05 on H0's boundary (U = ±0.05),
   375 vs 45,000, simulated;
3. continuity at 1,000 vs 1,001 positives (the old switch from the exact to the normal test):
   p-values at the same rates, and planning's power and method there.

    python benchmarks/berger_boos.py [--audits 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audits", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from biasaudit.tasks.planning import detection_power
    from biasaudit.tasks.twosample import two_sample_test
    from biasaudit.tasks.twosample_power import exact_power, normal_power

    rng = np.random.default_rng(args.seed)
    level, u_tol = 0.0007, 0.05
    print("| reference positives | exact power | normal power | simulated | seconds |")
    print("|---:|---:|---:|---:|---:|")
    for n_r in (1125, 4500, 45_000):
        start = time.perf_counter()
        exact = exact_power(375, n_r, 0.55, 0.70, u_tol, level)
        x_g, x_r = rng.binomial(375, 0.55, args.audits), rng.binomial(n_r, 0.70, args.audits)
        _, p, _ = two_sample_test(x_g, 375, x_r, n_r, u_tol)
        normal = float(normal_power(0.55, 375, 0.70, n_r, u_tol, level))
        seconds = time.perf_counter() - start
        print(
            f"| {n_r:,} | {exact:.3f} | {normal:.3f} | {(p <= level).mean():.3f} | {seconds:.1f} |"
        )
    print("\nsize at α = 0.05, 375 vs 45,000, reference rate 0.70:")
    for sign in (1, -1):
        x_g = rng.binomial(375, 0.70 + sign * u_tol, args.audits * 4)
        x_r = rng.binomial(45_000, 0.70, args.audits * 4)
        _, p, _ = two_sample_test(x_g, 375, x_r, 45_000, u_tol)
        print(f"  U = {sign * u_tol:+.2f}: {(p <= 0.05).mean():.4f} of {args.audits * 4} audits")
    print("\n1,000 vs 1,001 positives at 0.58 against 2,135 of 3,050 (0.70), tolerance 0.05:")
    _, p, _ = two_sample_test([580, 581], [1000, 1001], [2135, 2135], [3050, 3050], u_tol)
    power, method = detection_power(0.58, [1000, 1001], 0.70, 3050, u_tol, level)
    for i, n in enumerate((1000, 1001)):
        print(f"  {n}: p = {p[i]:.3g}, planning's power {power[i]:.4f} ({method[i]})")


if __name__ == "__main__":
    main()
