"""Coverage of the score audit's AUC interval and size of its two tests (tasks.scores).

Scores are a latent normal shifted by `shift` for positives, cut into 10 bins (ties, as deciles).
Printed as markdown tables (benchmarks/results/score_coverage.md):

1. coverage of the 95% AUC interval: Wald on DeLong's variance (the textbook interval, over
   samples with two positives and two negatives), and the product's (Newcombe's score-type
   interval below 50 positives or negatives, else Wald's on the logit scale with DeLong's
   variance; over samples with a positive and a negative), with the median width of each;
2. size at alpha = 0.05 of the test of equal AUC and of equal calibration, a group against a
   600-row reference drawn from the same model; beside the calibration score test, the
   likelihood-ratio test of the same hypothesis.

    python benchmarks/score_coverage.py [--reps 4000] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from biasaudit.tasks import scores as S

BINS = 10


def simulate(n, base, shift, reps, rng):
    y = rng.random((reps, n)) < base
    b = np.searchsorted(np.linspace(-1.5, 2.5, BINS - 1), rng.normal(size=(reps, n)) + shift * y)
    pos = np.stack([((b == k) & y).sum(1) for k in range(BINS)], 1)
    neg = np.stack([((b == k) & ~y).sum(1) for k in range(BINS)], 1)
    return pos, neg


def likelihood_ratio(bins, group, reference) -> float:
    """LR test of group and group x score added to bin indicators (fits by tasks.scores)."""
    (g_pos, g_neg), (r_pos, r_neg) = group, reference
    pos, neg = np.concatenate([g_pos, r_pos]), np.concatenate([g_neg, r_neg])
    level, in_group = np.concatenate([bins, bins]), np.repeat([1.0, 0.0], BINS)
    pooled_pos, pooled = g_pos + r_pos, g_pos + r_pos + g_neg + r_neg
    keep = np.tile((pooled_pos > 0) & (pooled_pos < pooled), 2) & (pos + neg > 0)
    if in_group[keep].min(initial=1) == 1 or in_group[keep].max(initial=0) == 0:
        return np.nan
    used = np.unique(level[keep])
    dummies = (level[keep][:, None] == used[None, :]).astype(float)
    x = level[keep] - level[keep].mean()
    full = np.column_stack([dummies, in_group[keep], in_group[keep] * x])
    trials = pos[keep] + neg[keep]
    null = S.logistic_fit(dummies, pos[keep], trials)[1]
    alternative = S.logistic_fit(full, pos[keep], trials)[1]
    return float(stats.chi2.sf(max(2 * (alternative - null), 0.0), 2))


def coverage(reps: int, rng) -> None:
    print("| rows | base rate | AUC | DeLong Wald | width | product | width |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    z = stats.norm.ppf(0.975)
    for n, base, shift in [
        (4, 0.5, 1.0), (6, 0.5, 2.0), (8, 0.3, 1.0), (10, 0.4, 1.0),
        (15, 0.4, 2.0), (20, 0.3, 1.0), (25, 0.1, 1.0), (40, 0.5, 2.0), (100, 0.4, 0.8),
        (400, 0.4, 1.0), (2000, 0.05, 1.5), (5000, 0.4, 1.0),
    ]:  # fmt: skip
        pos, neg = simulate(200_000, base, shift, 1, rng)
        truth = S.auc_and_variance(pos, neg)[0][0]
        pos, neg = simulate(n, base, shift, reps, rng)
        both = (pos.sum(1) > 1) & (neg.sum(1) > 1)
        auc, variance = S.auc_and_variance(pos[both], neg[both])
        wald = (np.abs(auc - truth) <= z * np.sqrt(variance)).mean()
        some = (pos.sum(1) > 0) & (neg.sum(1) > 0)
        _, _, low, high = S.auc_interval(pos[some], neg[some])
        ours = ((low <= truth) & (truth <= high)).mean()
        print(
            f"| {n} | {base} | {truth:.3f} | {wald:.3f} | {np.median(2 * z * np.sqrt(variance)):.3f}"
            f" | {ours:.3f} | {np.median(high - low):.3f} |"
        )


def size(reps: int, rng) -> None:
    print("| group rows | equal AUC | equal calibration (score test) | likelihood ratio |")
    print("| ---: | ---: | ---: | ---: |")
    bins = np.arange(float(BINS))
    for small in [10, 15, 30, 60, 200]:
        g_pos, g_neg = simulate(small, 0.4, 1.0, reps, rng)
        r_pos, r_neg = simulate(600, 0.4, 1.0, reps, rng)
        auc, score, lr = [], [], []
        for i in range(reps):
            auc.append(S.auc_difference_test(g_pos[i], g_neg[i], r_pos[i], r_neg[i]))
            group = (g_pos[i], g_neg[i], bins * (g_pos[i] + g_neg[i]))
            rest = (r_pos[i], r_neg[i], bins * (r_pos[i] + r_neg[i]))
            score.append(S.equal_calibration_test(bins, group, rest, False)[2])
            lr.append(likelihood_ratio(bins, (g_pos[i], g_neg[i]), (r_pos[i], r_neg[i])))
        cells = [np.nanmean(np.array(p, float) < 0.05) for p in (auc, score, lr)]
        print(f"| {small} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    coverage(args.reps, rng)
    print()
    size(args.reps, rng)


if __name__ == "__main__":
    main()
