"""Corrected between-group variance and its interval when one group's denominator is tiny.

K groups with true rates equally spaced on [0.4, 0.6]; the first group's denominator (e.g. TPR's
positives) is `tiny`, every other group's 200. Per replicate, each group's count is drawn from
Binomial(n_k, μ_k), then:
- before: every group in (the stage before its size rule was judged on denominators: a group of
  40 rows with 3 positives entered TPR's meta-metrics under min_group_size 30), with the same
  estimator and double-corrected interval;
- after: the meta-metrics stage (tasks.metametrics.attribute_meta_metrics) at the default
  min_group_size, which leaves out groups whose denominator is too small.
Bias is the mean corrected variance relative to the true variance of the groups each row
describes (all K before; the k the stage kept after), with its Monte Carlo standard error;
coverage is the share of 95% intervals containing that truth; `low = 0` the share starting at 0.

    python benchmarks/metametrics_tiny.py [--replicates 2000] [--boot 500]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from biasaudit.schemas.config import Thresholds
from biasaudit.tasks.metametrics import attribute_meta_metrics, bootstrap_variance_interval

OTHERS = 200


def metrics_frame(successes: np.ndarray, totals: np.ndarray) -> pd.DataFrame:
    """One attribute's TPR rows as the metrics stage writes them."""
    return pd.DataFrame(
        {
            "attribute": "a",
            "group_name": [f"g{i}" for i in range(totals.size)],
            "subset": "group",
            "metric": "tpr",
            "value": successes / totals,
            "numerator": successes.astype(float),
            "denominator": totals.astype(float),
        }
    )


def scenario(k: int, tiny: int, replicates: int, boot: int, rng) -> dict[str, float]:
    mu = np.linspace(0.4, 0.6, k)
    totals = np.full(k, OTHERS)
    totals[0] = tiny
    truth_all = mu.var(ddof=1)
    minimum = Thresholds().min_group_size
    before, raw, after, kept = [], [], [], []
    hits_before = hits_after = zero_before = zero_after = 0
    for r in range(replicates):
        x = rng.binomial(totals, mu)
        y = x / totals
        raw.append(y.var(ddof=1))
        point, low, high = bootstrap_variance_interval(x, totals, n_boot=boot, seed=r)
        before.append(point)
        hits_before += low <= truth_all <= high
        zero_before += low == 0
        row = attribute_meta_metrics(
            metrics_frame(x, totals),
            ["tpr"],
            n_boot=boot,
            confidence=0.95,
            seed=r,
            min_group_size=minimum,
        ).iloc[0]
        kept.append(int(row["k"]))
        truth = mu[k - int(row["k"]) :].var(ddof=1)  # the tiny group is the first
        after.append(row["corrected_var"] / truth)
        hits_after += row["interval_low"] <= truth <= row["interval_high"]
        zero_after += row["interval_low"] == 0
    before_rel = np.array(before) / truth_all - 1
    after_rel = np.array(after) - 1
    se = np.sqrt(replicates)
    return {
        "K": k,
        "tiny n": tiny,
        "before: raw var bias %": 100 * (np.mean(raw) / truth_all - 1),
        "before: corrected bias %": 100 * before_rel.mean(),
        "before: ± SE": 100 * before_rel.std(ddof=1) / se,
        "before: coverage": hits_before / replicates,
        "before: low = 0": zero_before / replicates,
        "after: k": float(np.mean(kept)),
        "after: corrected bias %": 100 * after_rel.mean(),
        "after: ± SE": 100 * after_rel.std(ddof=1) / se,
        "after: coverage": hits_after / replicates,
        "after: low = 0": zero_after / replicates,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=2000)
    parser.add_argument("--boot", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    rows = []
    for k in (4, 12, 30):
        for tiny in (2, 3, 5, 10, 20):
            rows.append(scenario(k, tiny, args.replicates, args.boot, rng))
            print(rows[-1], flush=True)  # progress: the table follows
    print(
        f"{args.replicates} replicates, B = {args.boot}, others' denominators {OTHERS}, "
        f"μ on [0.4, 0.6] ({time.perf_counter() - start:.0f} s)\n"
    )
    print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3g"))


if __name__ == "__main__":
    main()
