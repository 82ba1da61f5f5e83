"""MATCH test (Metric Alignment Trial for Checking Homogeneity).

Briscoe et al., "Algorithmic Accountability in Small Data", section 5.

For a group of n labelled predictions, the percentile of its observed metric under the distribution
the metric would have if those n predictions followed the reference confusion-matrix probabilities
p = CM_ref / n_ref (the rest of the population, or a named reference group):

- binomial metrics (cells a+b)/n: X ~ Binomial(n, p_a + p_b) (theorem 5.1); approximation: normal
  with continuity correction, used only when n·p >= 5 and n·(1-p) >= 5 (eq. 4);
- marginal benefit (FP − FN)/n: exact by summing the trinomial (theorem D.1), here as a binomial
  mixture over S = FP + FN; approximation z = (FP − FN + 0.5 − nμ)/(σ√n) with μ = p_FP − p_FN,
  σ² = p_FP + p_FN − μ² (the paper's eq. 5 drops the n);
- joint-ratio metrics a/(a+b): exact sum over the denominator count d ~ Binomial(n, p_a + p_b) with
  a | d ~ Binomial(d, p_a/(p_a + p_b)) (theorem 5.3); approximation Beta(n·p_a + 1, n·p_b + 1)
  (eq. 11). The exact percentile reported is conditional on the metric being defined (d >= 1):
  the unconditional sum is divided by 1 − (1 − p_a − p_b)^n.

Thresholds a·d/d_obs are compared in integers (floor division), never in floating point. The
two-sided p-value is min(1, 2·min(P(M <= m), P(M >= m))). The paper released no code for MATCH.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from biasaudit.schemas.frames import COUNT_COLUMNS
from biasaudit.schemas.metric_ids import (
    BINOMIAL_CELLS,
    JOINT_RATIO_CELLS,
    MARGINS,
    MATCH_METRICS,
    UNLABELLED_COLUMNS,
    rate_cells,
)
from biasaudit.tasks import distributions
from biasaudit.tasks.arrays import ragged
from biasaudit.tasks.metrics import COUNT_FIELDS
from biasaudit.tasks.multiplicity import bh_adjust
from biasaudit.tasks.rates import comparison_reasons

_WINDOW_SD = 8  # binomial mass beyond 8 standard deviations (+5) is below 1e-15
MATCH_EXACT_LIMIT = (
    20_000  # expected denominator count above which MB and JRMs use the approximation
)
# MATCH runs where the reference has at least this many times the group's predictions
# (benchmarks/calibration.py: size <= 0.0525 at α = 0.05 there, 0.18 at a ratio of 0.8).
MIN_REFERENCE_RATIO = 50.0


def _cells(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    return {
        c: frame[c].to_numpy(dtype="int64") if c in frame else np.zeros(len(frame), "int64")
        for c in (*COUNT_COLUMNS, *UNLABELLED_COLUMNS)
    }


def _mixture(n: np.ndarray, q: np.ndarray, cut, r: np.ndarray):
    """(P(X <= cut(S)), P(X >= cut(S))) with S ~ Binomial(n, q) and X | S ~ Binomial(S, r),
    summed over the window of S that holds the binomial's mass. ``cut(s, row)`` returns the
    threshold at counts ``s`` of rows ``row`` as an integer numerator and denominator (exact: no
    floating-point floor). Each row's window is laid out flat (ragged), not padded to the widest."""
    mean, sd = n * q, np.sqrt(n * q * (1 - q))
    lo = np.floor(np.maximum(0, mean - _WINDOW_SD * sd - 5)).astype("int64")
    hi = np.ceil(np.minimum(n, mean + _WINDOW_SD * sd + 5)).astype("int64")
    width = np.maximum(hi - lo + 1, 0)
    row = np.repeat(np.arange(len(n)), width)
    s = ragged(lo, width)
    weight = distributions.binom_pmf(s, n[row], q[row])
    top, bottom = cut(s, row)
    k = top // bottom  # floor of the threshold
    exact = top % bottom == 0  # the threshold is itself a count X can take
    below = distributions.binom_cdf(k, s, r[row])  # P(X <= threshold)
    at = np.where(exact, distributions.binom_pmf(k, s, r[row]), 0.0)
    # P(X >= threshold) = 1 − P(X <= floor) + P(X = threshold if it is an integer)
    lower = np.bincount(row, weight * below, minlength=len(n))
    return lower, np.bincount(row, weight * (1 - below + at), minlength=len(n))


def _two_sided(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    return np.minimum(1.0, 2 * np.minimum(lower, upper))


def _binomial(k, n, p):
    lower, upper = distributions.binom_cdf(k, n, p), distributions.binom_sf(k - 1, n, p)
    sd = np.sqrt(n * p * (1 - p))
    valid = (n * p >= 5) & (n * (1 - p) >= 5)
    with np.errstate(divide="ignore", invalid="ignore"):  # sd = 0 only where not valid
        below = np.where(valid, distributions.norm_cdf((k + 0.5 - n * p) / sd), np.nan)
        above = np.where(valid, distributions.norm_sf((k - 0.5 - n * p) / sd), np.nan)
    return lower, upper, (below, above)


def _exact_on(rows: np.ndarray, function, *arrays):
    """Run an exact (windowed-sum) computation on the selected rows only; NaN elsewhere."""
    lower, upper = np.full(rows.shape, np.nan), np.full(rows.shape, np.nan)
    if rows.any():
        lower[rows], upper[rows] = function(*(np.broadcast_to(a, rows.shape)[rows] for a in arrays))
    return lower, upper


def _marginal_benefit(fp, fn, n, p_fp, p_fn, exact):
    d = fp - fn
    q = p_fp + p_fn

    def windowed(d, n, p_fp, q):
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(q > 0, p_fp / q, 0.0)
        # D = 2·FP − S, so D <= d  <=>  FP <= (d + S)/2 (and >= likewise).
        return _mixture(n, q, lambda s, row: (d[row] + s, np.full_like(s, 2)), r)

    lower, upper = _exact_on(exact, windowed, d, n, p_fp, q)
    mu, var = p_fp - p_fn, p_fp + p_fn - (p_fp - p_fn) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        sd = np.sqrt(var * n)
        approx = (
            distributions.norm_cdf((d + 0.5 - n * mu) / sd),
            distributions.norm_sf((d - 0.5 - n * mu) / sd),
        )
    return lower, upper, approx


def _joint_ratio(a_obs, d_obs, n, p_a, p_b, exact):
    q = p_a + p_b

    def windowed(a_obs, d_obs, n, p_a, q):
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(q > 0, p_a / q, 0.0)
        d_safe = np.maximum(d_obs, 1)
        # M = A/S <= a_obs/d_obs  <=>  A <= a_obs·S/d_obs; only S >= 1 leaves M defined.
        lower, upper = _mixture(n, q, lambda s, row: (a_obs[row] * s, d_safe[row]), r)
        undefined = (1 - q) ** n  # S = 0 meets both thresholds (X = 0 = 0·m): remove its mass
        with np.errstate(divide="ignore", invalid="ignore"):
            return (lower - undefined) / (1 - undefined), (upper - undefined) / (1 - undefined)

    lower, upper = _exact_on(exact, windowed, a_obs, d_obs, n, p_a, q)
    with np.errstate(divide="ignore", invalid="ignore"):
        cdf = distributions.beta_cdf(a_obs / d_obs, n * p_a + 1, n * p_b + 1)
    return lower, upper, (cdf, 1 - cdf)


def match_test(
    group: pd.DataFrame,
    reference: pd.DataFrame,
    metrics=MATCH_METRICS,
    *,
    min_reference_ratio: float = MIN_REFERENCE_RATIO,
    min_group_size: int = 0,
    exact_limit: float = MATCH_EXACT_LIMIT,
) -> pd.DataFrame:
    """MATCH percentiles of each group row against the aligned reference row.

    Returns the group's key columns with ``metric``, ``predictions_group`` (the n predictions
    drawn: labelled ones, every valid one for PPR and PNR), ``percentile``, ``percentile_approx``,
    ``p_value`` (two-sided), ``p_adjusted`` (Benjamini-Hochberg across every MATCH test made),
    ``method`` and ``reason``. Binomial metrics are always exact (one CDF; PPR and PNR over every
    valid prediction). For MB and the joint-ratio metrics the exact sum runs over a window of the
    denominator count and costs O(sd) per group; where that count is expected above
    ``exact_limit``, ``percentile`` and ``p_value`` come from the approximation (``method`` says
    which), whose error there is below about 0.003 (Berry-Esseen).

    MATCH treats the reference's rates as exact. They are estimated, so a test of a group of n
    against a reference of n_ref has variance inflated by 1 + n/n_ref and its size exceeds α
    (0.18 for a group that is 55% of the data). It is run only where n_ref >=
    ``min_reference_ratio``·n (MIN_REFERENCE_RATIO, chosen by benchmarks/calibration.py); other
    rows, groups below ``min_group_size`` and repeats of a two-valued attribute's comparison
    (tasks.rates) carry the reason instead of a p-value.
    """
    g, ref = _cells(group), _cells(reference)
    n = np.asarray(sum(g[c] for c in COUNT_COLUMNS))
    n_ref = np.asarray(sum(ref[c] for c in COUNT_COLUMNS))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = {c: ref[c] / n_ref for c in COUNT_COLUMNS}
    keys = group.drop(columns=COUNT_FIELDS, errors="ignore").reset_index(drop=True)
    skipped = comparison_reasons(group, reference, min_group_size)
    blocks = []
    for metric in metrics:
        reason = np.full(len(group), None, dtype=object)
        size, size_ref = n, n_ref
        if metric in BINOMIAL_CELLS:
            numerator, denominator = rate_cells(metric)
            k = sum(g[c] for c in numerator)
            size = np.asarray(sum(g[c] for c in denominator))
            size_ref = np.asarray(sum(ref[c] for c in denominator))
            with np.errstate(divide="ignore", invalid="ignore"):
                rate = sum(ref[c] for c in numerator) / size_ref
            lower, upper, approx = _binomial(k, size, rate)
            exact, approximate = np.ones(len(group), bool), "normal"
        elif metric == "mb":
            exact = n * (p["fp"] + p["fn"]) <= exact_limit
            lower, upper, approx = _marginal_benefit(g["fp"], g["fn"], n, p["fp"], p["fn"], exact)
            approximate = "normal"
        else:
            a, margin = JOINT_RATIO_CELLS[metric]
            x, y, _ = MARGINS[margin]
            b = y if a == x else x
            d_obs = g[a] + g[b]
            exact = n * (p[a] + p[b]) <= exact_limit
            lower, upper, approx = _joint_ratio(g[a], d_obs, n, p[a], p[b], exact)
            approximate = "beta"
            reason = np.where(d_obs == 0, f"{margin} = 0 in group", reason)
            reason = np.where(
                (d_obs > 0) & (ref[a] + ref[b] == 0), f"{margin} = 0 in reference", reason
            )
        reason = np.where(size == 0, "n = 0 in group", reason)
        reason = np.where(size_ref == 0, "empty reference", reason)
        small_ref = pd.isna(reason) & (size_ref < min_reference_ratio * size)
        too_small = np.array(
            [
                f"reference {int(r)} < {min_reference_ratio:g} x group {int(m)}: its rates are "
                "not known well enough for MATCH"
                for r, m in zip(np.broadcast_to(size_ref, n.shape), np.broadcast_to(size, n.shape))
            ]
            if small_ref.any()
            else np.full(n.shape, None),
            dtype=object,
        )
        reason = np.where(small_ref, too_small, reason)
        reason = np.where(pd.isna(skipped), reason, skipped)
        defined = pd.isna(reason)
        lower = np.clip(np.where(exact, lower, approx[0]), 0.0, 1.0)
        upper = np.clip(np.where(exact, upper, approx[1]), 0.0, 1.0)
        blocks.append(
            keys.assign(
                metric=metric,
                predictions_group=size,
                percentile=np.where(defined, lower, np.nan),
                percentile_approx=np.where(defined, np.clip(approx[0], 0.0, 1.0), np.nan),
                p_value=np.where(defined, _two_sided(lower, upper), np.nan),
                method=np.where(exact, "exact", approximate),
                reason=reason,
            )
        )
    out = pd.concat(blocks, ignore_index=True)
    out.insert(out.columns.get_loc("p_value") + 1, "p_adjusted", bh_adjust(out["p_value"]))
    reason = out["reason"].astype(object)
    out["reason"] = reason.where(reason.notna(), None)
    return out
