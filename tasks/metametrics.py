"""Meta-metrics stage: one number per attribute summarising disparity across all its groups.

Lum, Zhang and Bower, "De-biasing 'bias' measurement". For
base-metric values Y_1..Y_K (e.g. each group's TPR), the six meta-metrics of the paper's table 1
are all biased upward when groups are small (its section 4). The corrected variance (eq. 2)
max(0, var(Y) − (1/K)Σ σ̂²_k) uses σ̂²_k = Y_k(1 − Y_k)/(n_k − 1), unbiased for the sampling
variance μ_k(1 − μ_k)/n_k (the paper's plug-in Y_k(1 − Y_k)/n_k has expectation
μ_k(1 − μ_k)(n_k − 1)/n_k² and under-corrects; a group with n_k = 1 has no estimate and is left
out, with the reason). Its bootstrap needs the double correction of section 5.3, re-derived for
this estimator: within a replicate, Y*(1 − Y*)/(n − 1) estimates the replicate's sampling variance
and Y*(1 − Y*)·n/(n − 1)² the original's, so σ̂²*_k = Y*_k(1 − Y*_k)(2n_k − 1)/(n_k − 1)² (the
paper's 2Y*(1 − Y*)/n − Y*(1 − Y*)/n² with n − 1 for n).

The bootstrap resamples counts, never rows: in the paper's model (1), X_k ~ Binomial(n_k, μ_k), so
resampling group k's n_k outcomes is X*_k ~ Binomial(n_k, Y_k). A group observed at 0 or 1 would
never vary across replicates, and the interval would ignore its uncertainty (coverage 0.25-0.6
with one group of 2-5 among six): such a group is drawn from the adjusted proportion
(x_k + 1/2)/(n_k + 1) instead (coverage >= 0.99 there, and still ~0.93 in the paper's table-3
scenario, where adjusting every group would cost it 0.15; benchmarks/calibration.py). For a
confusion-matrix rate, n_k is the metric's denominator count (its positives for TPR, ...).

A group whose denominator is tiny cannot take part honestly. The estimate before truncation is
unbiased, but one group of n_k = 3 makes it so noisy that max(0, ·) lifts its mean far above the
truth, and the bootstrap interval then always starts at 0 (K = 4 groups with one of 3: +152%;
K = 12: +62%; benchmarks/metametrics_tiny.py). No unbiased estimator can do better, since the
target weights that group's rate, seen in 3 outcomes, as much as any other. So the stage leaves
out of a metric's meta-metrics every group whose denominator for that metric (TPR's positives,
not the group's rows) is below ``min_group_size`` (default 30), and says so in ``reason``, naming
the groups: its numbers describe the k groups that remain (bias −4% to +8% and coverage
0.95-0.98 there in the same simulations). ``min_group_size`` is honoured as configured: below
MIN_DENOMINATOR the groups kept with a denominator under it are named in ``reason`` with the
warning that the corrected variance is biased upward with them; a denominator of 1 has no
variance estimate and is left out whatever ``min_group_size``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from biasaudit.schemas.frames import listed
from biasaudit.schemas.results import METAMETRIC_RESULTS

Method = Literal["uncorrected", "corrected", "double"]
MIN_DENOMINATOR = 20
"""Fewest outcomes in a metric's denominator for which the corrected variance is honest: with one
group of 10 among four it is still 18% high, with one of 20 within 3%
(benchmarks/metametrics_tiny.py). A group below it enters the meta-metrics only where
``min_group_size`` is below it too, and the row's ``reason`` names it."""
META_METRICS = ("mm_diff", "mm_ratio", "max_abs_diff", "mad", "var", "gei")


def meta_metrics(values, gei_exponent: float = 2.0) -> dict[str, float]:
    """The six meta-metrics of table 1 over the values of K groups (naive, i.e. uncorrected).

    max − min; max/min (the plain ratio the paper defines, not its code's +0.05 version; NaN when
    min = 0, see meta_metric_reasons); max_k |Y_k − Ȳ|; mean absolute deviation (1/K)Σ|Y_k − Ȳ|;
    variance (1/(K − 1))Σ(Y_k − Ȳ)²; generalised entropy index (1/(K a(a − 1)))Σ[(Y_k/Ȳ)^a − 1]
    with exponent a = ``gei_exponent`` not in {0, 1} (NaN when Ȳ = 0).
    """
    if gei_exponent in (0, 1):
        raise ValueError("the generalised entropy index needs an exponent not in {0, 1}")
    y = np.asarray(values, dtype=float)
    if y.size < 2:
        raise ValueError("meta-metrics need at least two groups")
    mean, a = y.mean(), gei_exponent
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "mm_diff": float(y.max() - y.min()),
            "mm_ratio": float(y.max() / y.min()) if y.min() > 0 else float("nan"),
            "max_abs_diff": float(np.abs(y - mean).max()),
            "mad": float(np.abs(y - mean).mean()),
            "var": float(y.var(ddof=1)),
            "gei": float(((y / mean) ** a - 1).sum() / (y.size * a * (a - 1)))
            if mean > 0
            else float("nan"),
        }


def meta_metric_reasons(values) -> list[str]:
    """Why meta_metrics leaves a value undefined: the ratio at min = 0, the GEI at mean = 0."""
    y = np.asarray(values, dtype=float)
    reasons = []
    if y.min() <= 0:
        reasons.append("mm_ratio undefined: min = 0")
    if y.mean() <= 0:
        reasons.append("gei undefined: mean = 0")
    return reasons


def _correction(y, n, method: Method):
    """(1/K)Σ σ̂²_k along the last axis for the single or double correction (module doc)."""
    if method == "corrected":
        return (y * (1 - y) / (n - 1)).mean(axis=-1)
    return (y * (1 - y) * (2 * n - 1) / (n - 1) ** 2).mean(axis=-1)


def corrected_variance(values, totals) -> float:
    """Eq. 2 with the unbiased σ̂²_k: max(0, var(Y) − (1/K)Σ Y_k(1 − Y_k)/(n_k − 1)), n_k >= 2."""
    y, n = np.asarray(values, float), np.asarray(totals, float)
    if np.any(n < 2):
        raise ValueError("every group needs n >= 2 for a variance estimate")
    return float(max(0.0, y.var(ddof=1) - _correction(y, n, "corrected")))


def _estimate(y, n, method: Method):
    variance = y.var(axis=-1, ddof=1)
    if method == "uncorrected":
        return variance
    return np.maximum(0.0, variance - _correction(y, n, method))


BOOTSTRAP_BYTES = 256 * 2**20
"""Budget for the bootstrap's replicate x group arrays (drawn counts and _estimate's temporaries)."""
_CELL_BYTES = 32  # measured peak is 24 bytes per replicate x group cell; the rest is margin


def _replicate_estimates(n, resample, n_boot: int, method: Method, rng) -> np.ndarray:
    """The n_boot replicates' estimates, drawn and reduced a block of replicates at a time.

    A block holds as many whole replicates as fit in BOOTSTRAP_BYTES (at least one). Blocks draw
    from ``rng`` in replicate order, so the numbers drawn, and every replicate's estimate, are
    those of drawing the whole (n_boot, K) array at once.
    """
    per_block = max(1, BOOTSTRAP_BYTES // (_CELL_BYTES * n.size))
    trials, estimates = n.astype(np.int64), np.empty(n_boot)
    for start in range(0, n_boot, per_block):
        stop = min(start + per_block, n_boot)
        draws = rng.binomial(trials, resample, size=(stop - start, n.size)) / n
        estimates[start:stop] = _estimate(draws, n, method)
    return estimates


def bootstrap_variance_interval(
    successes,
    totals,
    *,
    method: Method = "double",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed=None,
) -> tuple[float, float, float]:
    """(point estimate, low, high): percentile bootstrap interval of the between-group variance.

    Each replicate draws X*_k ~ Binomial(n_k, Y_k) for all groups at once, with
    (x_k + 1/2)/(n_k + 1) for Y_k where Y_k is 0 or 1 (module doc), in blocks of replicates whose
    arrays fit in BOOTSTRAP_BYTES. The point estimate is the uncorrected variance for
    ``uncorrected`` and the corrected variance (eq. 2) otherwise; within replicates the
    correction is single or double (section 5.3, re-derived with n − 1). Every n_k must be >= 2.
    """
    if method not in ("uncorrected", "corrected", "double"):
        raise ValueError(f"method must be uncorrected, corrected or double, not {method!r}")
    x, n = np.asarray(successes, float), np.asarray(totals, float)
    if x.shape != n.shape or x.ndim != 1 or x.size < 2:
        raise ValueError("successes and totals must be 1-d arrays of the same length >= 2")
    if np.any(n < 2) or np.any((x < 0) | (x > n)):
        raise ValueError("every group needs 0 <= successes <= totals and totals >= 2")
    y = x / n
    resample = np.where((x == 0) | (x == n), (x + 0.5) / (n + 1), y)
    replicates = _replicate_estimates(n, resample, n_boot, method, np.random.default_rng(seed))
    low, high = np.quantile(replicates, [(1 - confidence) / 2, (1 + confidence) / 2])
    point = _estimate(y, n, "corrected" if method == "double" else method)
    return float(point), float(low), float(high)


def attribute_meta_metrics(
    metrics: pd.DataFrame,
    rates: list[str],
    *,
    n_boot: int,
    confidence: float,
    seed: int,
    min_group_size: int = 0,
) -> pd.DataFrame:
    """Per attribute and rate metric: naive meta-metrics, corrected variance, double-corrected
    interval, the number of groups ``k``, their rate denominators (``denominator_min``,
    ``denominator_median``, ``denominator_max``) and ``reason``.

    Left out, counted in ``k_undefined`` and named in ``reason``: groups where the metric is
    undefined and groups whose denominator for the metric is below ``min_group_size`` (or is 1:
    no variance estimate). Groups kept with a denominator below MIN_DENOMINATOR are named in
    ``reason`` too (module doc).
    """
    groups = metrics[(metrics["subset"] == "group") & metrics["metric"].isin(rates)]
    rows = []
    for (attribute, metric), part in groups.groupby(["attribute", "metric"], sort=True):
        why = []
        defined = part[part["value"].notna()]
        if len(defined) < len(part):
            undefined = part[part["value"].isna()]["group_name"]
            why.append(f"{len(undefined)} undefined: {listed(undefined)}")
        if min_group_size >= 2:
            small = defined["denominator"] < min_group_size
            rule = f"a denominator below {min_group_size} for {metric} (min_group_size {min_group_size})"
        else:  # below 2 there is no variance estimate (n_k - 1 = 0), whatever min_group_size
            small = defined["denominator"] < 2
            rule = f"a denominator of 1 for {metric} (no variance estimate)"
        if small.any():
            why.append(f"{int(small.sum())} with {rule}: {listed(defined[small]['group_name'])}")
            defined = defined[~small]
        noisy = defined[defined["denominator"] < MIN_DENOMINATOR]["group_name"]
        row = {
            "attribute": attribute,
            "metric": metric,
            "k": len(defined),
            "k_undefined": len(part) - len(defined),
        }
        reasons = [f"groups left out: {'; '.join(why)}"] if why else []
        if len(noisy):
            reasons.append(
                f"{len(noisy)} kept with a denominator below {MIN_DENOMINATOR} for {metric} "
                f"(min_group_size {min_group_size}): {listed(noisy)}; the corrected variance is "
                f"biased upward with them (max(0, ·) of a noisy estimate); min_group_size >= "
                f"{MIN_DENOMINATOR} leaves them out"
            )
        if len(defined) >= 2:
            sizes = defined["denominator"].to_numpy()
            row.update(meta_metrics(defined["value"]))
            reasons += meta_metric_reasons(defined["value"])
            row["corrected_var"] = corrected_variance(defined["value"], sizes)
            _, row["interval_low"], row["interval_high"] = bootstrap_variance_interval(
                defined["numerator"], sizes, n_boot=n_boot, confidence=confidence, seed=seed
            )
            row.update(
                denominator_min=sizes.min(),
                denominator_median=float(np.median(sizes)),
                denominator_max=sizes.max(),
            )
        else:
            reasons.append("fewer than two groups to compare")
        row["reason"] = "; ".join(reasons) or None
        rows.append(row)
    columns = [c for c in METAMETRIC_RESULTS.columns if c != "confidence"]
    frame = pd.DataFrame(rows, columns=columns)  # every column, NaN where not estimable
    kinds = {c: "float64" for c in columns} | {"attribute": str, "metric": str, "reason": object}
    kinds |= {"k": "int64", "k_undefined": "int64"}
    return frame.astype(kinds).assign(confidence=confidence)
