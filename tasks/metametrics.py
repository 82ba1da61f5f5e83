"""Meta-metrics stage: one number per attribute summarising disparity across all its groups.

Lum et al., "De-biasing 'bias' measurement" (debiasing-bias-measurement.txt; SPEC section 5). For
base-metric values Y_1..Y_K (e.g. each group's TPR), the six meta-metrics of the paper's table 1
are all biased upward when groups are small (its section 4). The corrected variance (eq. 2)
max(0, var(Y) − (1/K)Σ σ̂²_k), σ̂²_k = Y_k(1 − Y_k)/n_k, is unbiased before truncation; its
bootstrap needs the double correction of section 5.3, σ̂²*_k = 2Y*_k(1 − Y*_k)/n_k − Y*_k(1 − Y*_k)/n_k²,
for percentile intervals that cover.

The bootstrap resamples counts, never rows: in the paper's model (1), X_k ~ Binomial(n_k, μ_k), so
resampling group k's n_k outcomes with replacement is exactly X*_k ~ Binomial(n_k, Y_k). For a
confusion-matrix rate, n_k is the metric's denominator count (its positives for TPR, ...), held
fixed as the paper's derivation holds it.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

Method = Literal["uncorrected", "corrected", "double"]
META_METRICS = ("mm_diff", "mm_ratio", "max_abs_diff", "mad", "var", "gei")


def meta_metrics(values, alpha: float = 2.0) -> dict[str, float]:
    """The six meta-metrics of table 1 over the values of K groups (naive, i.e. uncorrected).

    max − min; max/min (the plain ratio the paper defines, not its code's +0.05 version; inf when
    min = 0); max_k |Y_k − Ȳ|; mean absolute deviation (1/K)Σ|Y_k − Ȳ|; variance
    (1/(K − 1))Σ(Y_k − Ȳ)²; generalised entropy index (1/(K α(α − 1)))Σ[(Y_k/Ȳ)^α − 1], α ∉ {0, 1}.
    """
    if alpha in (0, 1):
        raise ValueError("the generalised entropy index needs alpha not in {0, 1}")
    y = np.asarray(values, dtype=float)
    if y.size < 2:
        raise ValueError("meta-metrics need at least two groups")
    mean = y.mean()
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "mm_diff": float(y.max() - y.min()),
            "mm_ratio": float(y.max() / y.min()) if y.min() > 0 else float("inf"),
            "max_abs_diff": float(np.abs(y - mean).max()),
            "mad": float(np.abs(y - mean).mean()),
            "var": float(y.var(ddof=1)),
            "gei": float(((y / mean) ** alpha - 1).sum() / (y.size * alpha * (alpha - 1))),
        }


def _correction(y, n, method: Method):
    """(1/K)Σ σ̂²_k along the last axis for the single or double correction."""
    plug_in = y * (1 - y) / n
    if method == "corrected":
        return plug_in.mean(axis=-1)
    return (2 * plug_in - y * (1 - y) / n**2).mean(axis=-1)


def corrected_variance(values, totals) -> float:
    """Eq. 2: max(0, var(Y) − (1/K)Σ Y_k(1 − Y_k)/n_k), unbiased for the between-group variance."""
    y, n = np.asarray(values, float), np.asarray(totals, float)
    return float(max(0.0, y.var(ddof=1) - _correction(y, n, "corrected")))


def _estimate(y, n, method: Method):
    variance = y.var(axis=-1, ddof=1)
    if method == "uncorrected":
        return variance
    return np.maximum(0.0, variance - _correction(y, n, method))


def bootstrap_variance_interval(
    successes,
    totals,
    *,
    method: Method = "double",
    n_boot: int = 1000,
    level: float = 0.95,
    seed=None,
) -> tuple[float, float, float]:
    """(point estimate, low, high): percentile bootstrap interval of the between-group variance.

    Each replicate draws X*_k ~ Binomial(n_k, Y_k) for all groups at once (a (n_boot, K) array).
    The point estimate is the uncorrected variance for ``uncorrected`` and the corrected variance
    (eq. 2) otherwise; within replicates the correction is single or double (section 5.3).
    """
    if method not in ("uncorrected", "corrected", "double"):
        raise ValueError(f"method must be uncorrected, corrected or double, not {method!r}")
    x, n = np.asarray(successes, float), np.asarray(totals, float)
    if x.shape != n.shape or x.ndim != 1 or x.size < 2:
        raise ValueError("successes and totals must be 1-d arrays of the same length >= 2")
    if np.any(n <= 0) or np.any((x < 0) | (x > n)):
        raise ValueError("every group needs 0 <= successes <= totals and totals > 0")
    y = x / n
    draws = np.random.default_rng(seed).binomial(n.astype(np.int64), y, size=(n_boot, y.size)) / n
    replicates = _estimate(draws, n, method)
    low, high = np.quantile(replicates, [(1 - level) / 2, (1 + level) / 2])
    point = _estimate(y, n, "corrected" if method == "double" else method)
    return float(point), float(low), float(high)


def attribute_meta_metrics(
    metrics: pd.DataFrame, rates: list[str], n_boot: int, level: float, seed: int
) -> pd.DataFrame:
    """Per attribute and rate metric: naive meta-metrics, corrected variance, double-corrected
    interval, the number of groups and their sizes (groups where the metric is undefined are left
    out and counted)."""
    groups = metrics[(metrics["subset"] == "group") & metrics["metric"].isin(rates)]
    rows = []
    for (attribute, metric), part in groups.groupby(["attribute", "metric"], sort=True):
        defined = part[part["value"].notna()]
        row = {
            "attribute": attribute,
            "metric": metric,
            "k": len(defined),
            "k_undefined": len(part) - len(defined),
        }
        if len(defined) >= 2:
            sizes = defined["denominator"].to_numpy()
            row.update(meta_metrics(defined["value"]))
            row["corrected_var"] = corrected_variance(defined["value"], sizes)
            _, row["interval_low"], row["interval_high"] = bootstrap_variance_interval(
                defined["numerator"], sizes, n_boot=n_boot, level=level, seed=seed
            )
            row.update(n_min=sizes.min(), n_median=float(np.median(sizes)), n_max=sizes.max())
        rows.append(row)
    frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=["attribute", "metric", "k"])
    return frame.astype({"attribute": str, "metric": str, "k": "int64"}).assign(level=level)
