"""Operating characteristics and cost of the detection rules: the blog's simulation.

Random true biases |e2 − e1| uniform in [0, 0.2] (random sign, e1 uniform in [0.2, 0.6]),
tolerance t = 0.1, N decisions split equally between the two groups, for N = 100, 1,000 and 10,000.
A trial is truly biased when |e2 − e1| > t. For each rule and confidence level: true positive rate
(flagged | truly biased), false positive rate (flagged | not), and the time per 10,000 decisions.

    python benchmarks/detection_oc.py [--trials 10000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy import stats

from biasaudit.tasks.detection import (
    beta_difference,
    hdi_difference,
    rope_decision,
    unfairness_test,
)
from biasaudit.tasks.posterior import prob_deviation

TOLERANCE = 0.1
CONFIDENCES = [0.68, 0.90, 0.95, 0.997]


def timed(function):
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def rules(x1, n1, x2, n2, confidence):
    """Flags of each rule at one confidence level, with their compute time."""
    z = stats.norm.ppf(1 - (1 - confidence) / 2)
    out = {}

    def simple():
        mean, var = beta_difference(x2, n2, x1, n1)
        sd = np.sqrt(var)
        return (mean - z * sd > TOLERANCE) | (mean + z * sd < -TOLERANCE)

    def deviation():
        return prob_deviation(x2, n2, x1, n1, TOLERANCE) > confidence

    def hdi_rope():
        low, high = hdi_difference(x2, n2, x1, n1, confidence)
        return rope_decision(low, high, TOLERANCE) == "biased"

    def frequentist():
        return unfairness_test(x2, n2, x1, n1, TOLERANCE)[1] < 1 - confidence

    for name, rule in [
        ("simple μ ± zσ", simple),
        ("P(|T|>t) > c", deviation),
        ("HDI + ROPE", hdi_rope),
        ("Agresti-Caffo test", frequentist),
    ]:
        out[name] = timed(rule)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rows = []
    for total in (100, 1_000, 10_000):
        bias = rng.uniform(0, 0.2, args.trials) * rng.choice([-1, 1], args.trials)
        e1 = rng.uniform(0.2, 0.6, args.trials)
        e2 = e1 + bias
        n = np.full(args.trials, total // 2)
        x1, x2 = rng.binomial(n, e1), rng.binomial(n, e2)
        truly = np.abs(bias) > TOLERANCE
        for confidence in CONFIDENCES:
            for name, (flags, seconds) in rules(x1, n, x2, n, confidence).items():
                rows.append(
                    {
                        "N": total,
                        "confidence": confidence,
                        "rule": name,
                        "TPR": flags[truly].mean(),
                        "FPR": flags[~truly].mean(),
                        "s per 10k": seconds * 10_000 / args.trials,
                    }
                )
    table = pd.DataFrame(rows)
    print(f"{args.trials} trials per N; tolerance {TOLERANCE}\n")
    print(
        table.pivot_table(
            index=["N", "confidence"], columns="rule", values=["TPR", "FPR"]
        ).to_markdown(floatfmt=".3f")
    )
    cost = table.groupby("rule")["s per 10k"].median()
    print("\nmedian seconds per 10,000 decisions, and ratio to the simple rule:\n")
    print(
        pd.DataFrame({"s per 10k": cost, "× simple": cost / cost["simple μ ± zσ"]}).to_markdown(
            floatfmt=".4g"
        )
    )


if __name__ == "__main__":
    main()
