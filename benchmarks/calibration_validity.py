"""The score audit's calibration test and AUC on continuous scores (tasks.scores).

Sections (each prints a markdown table; benchmarks/results/score_calibration.md keeps the results):

1. size of the calibration tests under calibrated nulls whose score distributions differ: the group's
   scores Beta(4, 2), its reference's Beta(2, 4), every outcome Bernoulli(score); the test of each
   group's own calibration (own_calibration_test, on the group's counts per distinct score) beside
   the test it replaces (equal_calibration_test of the group against its reference in the window's
   decile bins), group sizes 50 to 20,000, references 1x to 100x larger;
2. power against a 0.05 miscalibration (the group's outcomes Bernoulli(min(1, score + 0.05)), its
   reference calibrated, both Beta(2, 4) so that the replaced test is valid too);
3. coverage of the AUC interval (auc_interval) of a continuous score at AUC 0.96 with about 100
   positives, the AUC exact (per distinct score);
4. the push-down's AUC (counts per cell of 1/SUBCELLS of a decile bin) against the rows' own:
   the largest error and its bound (half the share of positive-negative pairs sharing a cell).

    python benchmarks/calibration_validity.py [--reps 600] [--seed 0] [--sections 1,2,3,4]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats
from scipy.special import expit, logit
from sklearn.metrics import roc_auc_score

from biasaudit.schemas.score_bins import bins_of_scores, cell_of
from biasaudit.tasks import scores as S

ALPHA = 0.05
SIZES = [50, 200, 2000, 20000]
RATIOS = [1, 10, 100]
MAX_REFERENCE = 200_000


def _per_value(scores: np.ndarray, y: np.ndarray):
    """(values, positives, negatives) per distinct score."""
    values, index = np.unique(scores, return_inverse=True)
    positives = np.bincount(index, weights=y, minlength=len(values))
    return values, positives, np.bincount(index, minlength=len(values)) - positives


def _binned(scores, y, edges):
    """(positives, negatives, score sums) per decile bin of ``edges``."""
    index = np.clip(np.searchsorted(edges, scores, side="right") - 1, 0, len(edges) - 1)
    k = len(edges)
    positives = np.bincount(index, weights=y, minlength=k)
    labelled = np.bincount(index, minlength=k)
    return positives, labelled - positives, np.bincount(index, weights=scores, minlength=k)


def _own_p(scores, y) -> float:
    values, positives, negatives = _per_value(scores, y)
    return S.own_calibration_test(values, positives, negatives)[2]


def _replaced_p(g_scores, g_y, r_scores, r_y) -> float:
    edges = bins_of_scores(np.concatenate([g_scores, r_scores])).edges
    group, reference = _binned(g_scores, g_y, edges), _binned(r_scores, r_y, edges)
    return S.equal_calibration_test(edges, group, reference, True)[2]


def _rate(rejections: list[bool]) -> str:
    r = np.mean(rejections)
    return f"{r:.3f} ± {np.sqrt(r * (1 - r) / len(rejections)):.3f}"


def section_size(reps: int, rng) -> None:
    print("\n### 1. Size under calibrated nulls (group Beta(4,2), reference Beta(2,4))\n")
    print("| group | reference | own calibration | replaced (decile bins) |")
    print("| ---: | ---: | ---: | ---: |")
    for n in SIZES:
        for ratio in RATIOS:
            m = n * ratio
            if m > MAX_REFERENCE:
                continue
            own, replaced = [], []
            for _ in range(reps):
                g = rng.beta(4, 2, n)
                r = rng.beta(2, 4, m)
                gy, ry = (rng.random(n) < g).astype(float), (rng.random(m) < r).astype(float)
                own.append(_own_p(g, gy) < ALPHA)
                replaced.append(_replaced_p(g, gy, r, ry) < ALPHA)
            print(f"| {n:,} | {m:,} | {_rate(own)} | {_rate(replaced)} |")


def section_small(reps: int, rng) -> None:
    print("\n### 1b. Size of the own test in small groups (Monte Carlo p below 50 rows)\n")
    print("| rows | scores | own calibration |")
    print("| ---: | --- | ---: |")
    for n in (5, 10, 20, 35, 50, 80):
        for a, b in ((4, 2), (20, 1), (0.5, 5)):
            own = []
            for _ in range(reps):
                g = rng.beta(a, b, n)
                own.append(_own_p(g, (rng.random(n) < g).astype(float)) < ALPHA)
            print(f"| {n} | Beta({a}, {b}) | {_rate(own)} |")


def section_power(reps: int, rng) -> None:
    print("\n### 2. Power against a 0.05 miscalibration (both Beta(2,4); group y ~ score + 0.05)\n")
    print("| group | reference | own calibration | replaced (decile bins) |")
    print("| ---: | ---: | ---: | ---: |")
    for n in SIZES[:3]:
        for ratio in (1, 10):
            m = n * ratio
            own, replaced = [], []
            for _ in range(reps):
                g, r = rng.beta(2, 4, n), rng.beta(2, 4, m)
                gy = (rng.random(n) < np.minimum(1, g + 0.05)).astype(float)
                ry = (rng.random(m) < r).astype(float)
                own.append(_own_p(g, gy) < ALPHA)
                replaced.append(_replaced_p(g, gy, r, ry) < ALPHA)
            print(f"| {n:,} | {m:,} | {_rate(own)} | {_rate(replaced)} |")


def section_auc(reps: int, rng) -> None:
    print("\n### 3. AUC interval coverage, continuous score, AUC 0.96\n")
    print("| positives | negatives | AUC | product | width | Wald (logit, DeLong) | width |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    shift = np.sqrt(2) * stats.norm.ppf(0.96)  # binormal, equal variances: AUC = Phi(d / sqrt 2)
    for p, q in ((50, 2000), (100, 100), (100, 1000), (100, 5000), (400, 4000), (500, 5000),
                 (1000, 10000), (2000, 20000)):  # fmt: skip
        covered, widths = [], []
        for _ in range(reps):
            pos, neg = rng.normal(shift, 1, p), rng.normal(0, 1, q)
            scores = np.concatenate([pos, neg])
            y = np.concatenate([np.ones(p), np.zeros(q)])
            _, positives, negatives = _per_value(scores, y)
            auc, variance, low, high = S.auc_interval(positives, negatives)
            half = stats.norm.ppf(0.975) * np.sqrt(variance) / (auc * (1 - auc))
            wald_low, wald_high = (expit(logit(auc) + sign * half) for sign in (-1, 1))
            covered.append((low[0] <= 0.96 <= high[0], wald_low[0] <= 0.96 <= wald_high[0]))
            widths.append((high[0] - low[0], wald_high[0] - wald_low[0]))
        (c, cw), (w, ww) = np.mean(covered, 0), np.median(widths, 0)
        print(f"| {p} | {q} | 0.96 | {c:.3f} | {w:.3f} | {cw:.3f} | {ww:.3f} |")


def section_cells(reps: int, rng) -> None:
    print("\n### 4. Push-down AUC from cells against roc_auc_score on the rows\n")
    print("| rows | scores | largest error | largest bound |")
    print("| ---: | --- | ---: | ---: |")
    for n in (1000, 20000, 200000):
        for name, draw in (
            ("Beta(2, 4)", lambda k: rng.beta(2, 4, k)),
            ("fraud: Beta(0.05, 20)", lambda k: rng.beta(0.05, 20, k)),
            ("0-100 normal", lambda k: 50 + 15 * rng.normal(size=k)),
        ):
            worst = bound = 0.0
            for _ in range(max(1, reps // 60)):
                s = draw(n)
                chance = s if s.max() <= 1 else 1 / (1 + np.exp(-(s - 50) / 10))
                y = (rng.random(n) < chance).astype(float)
                if y.min() == y.max():
                    continue
                cells = cell_of(s, bins_of_scores(s))
                _, positives, negatives = _per_value(cells, y)
                got = S.auc_and_variance(positives, negatives)[0][0]
                worst = max(worst, abs(got - roc_auc_score(y, s)))
                shared = (positives * negatives).sum() / (positives.sum() * negatives.sum())
                bound = max(bound, shared / 2)
            print(f"| {n:,} | {name} | {worst:.1e} | {bound:.1e} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sections", default="1,2,3,4")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    sections = {
        "1": [section_size, section_small],
        "2": [section_power],
        "3": [section_auc],
        "4": [section_cells],
    }
    for key in args.sections.split(","):
        for section in sections[key]:
            started = time.perf_counter()
            section(args.reps, rng)
            print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
