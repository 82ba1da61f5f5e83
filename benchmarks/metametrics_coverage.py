"""Coverage of bootstrap intervals of the between-group variance, and bias of naive meta-metrics.

Reproduces the simulations of "De-biasing 'bias' measurement" (Lum, Zhang and Bower):
- table 3: K = 100 groups, 5,000 individuals, equal (50 each) or unequal (10..90) group sizes,
  equal (0.8) or unequal (0.1..0.9) performance, 1,000 replicates, B = 500: coverage of the 95%
  percentile intervals of the uncorrected, corrected and double-corrected variance;
- figure 2: bias M(Y) − M(μ) of each naive meta-metric as K grows (n_k = round(5000/K), μ equally
  spaced on [l, 0.9]), averaged over 1,000 simulations.

    python benchmarks/metametrics_coverage.py [--replicates 1000] [--boot 500]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from biasaudit.tasks.metametrics import META_METRICS, bootstrap_variance_interval, meta_metrics

K = 100


def scenarios():
    k = np.arange(K)
    equal_sizes = np.full(K, 50)
    unequal_sizes = np.round(10 + 80 * k / (K - 1)).astype(int)
    equal_perf = np.full(K, 0.8)
    unequal_perf = 0.1 + 0.8 * k / (K - 1)
    return {
        "equal size, equal perf": (equal_sizes, equal_perf),
        "unequal size, equal perf": (unequal_sizes, equal_perf),
        "equal size, unequal perf": (equal_sizes, unequal_perf),
        "unequal size, unequal perf": (unequal_sizes, unequal_perf),
    }


def coverage(replicates: int, boot: int, rng) -> pd.DataFrame:
    rows = []
    for name, (sizes, mu) in scenarios().items():
        truth = mu.var(ddof=1)
        hits = {"uncorrected": 0, "corrected": 0, "double": 0}
        for _ in range(replicates):
            x = rng.binomial(sizes, mu)
            for method in hits:
                _, low, high = bootstrap_variance_interval(
                    x, sizes, method=method, n_boot=boot, seed=rng
                )
                hits[method] += low <= truth <= high
        rows.append(
            {
                "scenario": name,
                "true variance": truth,
                **{m: 100 * h / replicates for m, h in hits.items()},
            }
        )
    return pd.DataFrame(rows)


def naive_bias(sims: int, rng) -> pd.DataFrame:
    rows = []
    for lower in (0.5, 0.7, 0.9):
        for k in (5, 10, 20, 50, 100, 150):
            sizes = np.full(k, round(5000 / k))
            mu = np.full(k, 0.9) if lower == 0.9 else lower + (0.9 - lower) * np.arange(k) / (k - 1)
            truth = meta_metrics(mu)
            estimates = [meta_metrics(rng.binomial(sizes, mu) / sizes) for _ in range(sims)]
            mean = pd.DataFrame(estimates).mean()
            rows.append(
                {"lower bound l": lower, "K": k, **{m: mean[m] - truth[m] for m in META_METRICS}}
            )
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=1000)
    parser.add_argument("--boot", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    table = coverage(args.replicates, args.boot, rng)
    print(
        f"coverage (%) of 95% intervals, {args.replicates} replicates, B = {args.boot} "
        f"({time.perf_counter() - start:.0f} s)\n"
    )
    print(table.to_markdown(index=False, floatfmt=".4g"))
    start = time.perf_counter()
    bias = naive_bias(1000, rng)
    print(
        f"\nbias M(Y) − M(μ) of the naive meta-metrics, 1,000 simulations "
        f"({time.perf_counter() - start:.0f} s)\n"
    )
    print(bias.to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main()
