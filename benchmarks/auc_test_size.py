"""Size and power of the test of equal AUC (tasks.scores.independent_auc_test) against the z on
the AUC's own scale it replaced, on score_coverage.py's simulation (10 score bins).

    .venv/bin/python benchmarks/auc_test_size.py --reps 40000
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats
from score_coverage import simulate  # this folder is on the path when run as a script

from biasaudit.tasks import scores as S

CASES = [  # group rows, reference rows, base rate, group shift, reference shift
    (60, 600, 0.4, 1.0, 1.0), (200, 600, 0.4, 1.0, 1.0), (200, 600, 0.4, 2.0, 2.0),
    (200, 6000, 0.4, 1.0, 1.0), (200, 2000, 0.4, 1.0, 1.0), (400, 600, 0.4, 1.0, 1.0),
    (2000, 600, 0.4, 1.0, 1.0), (200, 600, 0.1, 1.0, 1.0), (600, 600, 0.25, 1.0, 1.0),
    (200, 600, 0.4, 3.0, 3.0), (200, 600, 0.4, 0.6, 1.0), (400, 600, 0.4, 0.7, 1.0),
    (200, 6000, 0.4, 0.6, 1.0), (1000, 6000, 0.4, 0.85, 1.0),
]  # fmt: skip


def auc_scale(side_a, side_b):
    """The replaced test: z = (A_a − A_b)/sqrt(var_a + var_b), a side below SMALL_SAMPLE floored
    by Hanley & McNeil's variance at the shared AUC."""
    (auc_a, var_a, p_a, q_a), (auc_b, var_b, p_b, q_b) = side_a, side_b
    pairs_a, pairs_b = p_a * q_a, p_b * q_b
    with np.errstate(all="ignore"):
        shared = (auc_a * pairs_a + auc_b * pairs_b) / (pairs_a + pairs_b)
        var = [
            np.where(np.minimum(p, q) < S.SMALL_SAMPLE, np.fmax(v, S.hanley_mcneil_variance(shared, p, q)), v)
            for v, p, q in ((var_a, p_a, q_a), (var_b, p_b, q_b))
        ]
        z = (auc_a - auc_b) / np.sqrt(var[0] + var[1])
    return np.where(np.isfinite(z), 2 * stats.norm.sf(np.abs(z)), np.nan)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print("| group rows | reference rows | base rate | group shift | reference shift | before | after |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for small, big, base, shift_g, shift_r in CASES:
        before, after = [], []
        for _ in range(max(args.reps // 5000, 1)):
            sides = []
            for n, shift in ((small, shift_g), (big, shift_r)):
                pos, neg = simulate(n, base, shift, 5000, rng)
                auc, var = S.auc_and_variance(pos, neg)
                sides.append((auc, var, pos.sum(1).astype(float), neg.sum(1).astype(float)))
            before.append(auc_scale(*sides))
            after.append(S.independent_auc_test(*sides))
        rates = [np.nanmean(np.concatenate(p) < 0.05) for p in (before, after)]
        print(f"| {small} | {big} | {base} | {shift_g} | {shift_r} | {rates[0]:.4f} | {rates[1]:.4f} |")


if __name__ == "__main__":
    main()
