"""MATCH test (Metric Alignment Trial for Checking Homogeneity), small-data-metrics-match-cps.txt §5.

For a group of n labelled predictions, the percentile of its observed metric under the distribution
the metric would have if those n predictions followed the reference confusion-matrix probabilities
p = CM_ref / n_ref (the rest of the population, or a named reference group):

- binomial metrics (cells a+b)/n: X ~ Binomial(n, p_a + p_b) (theorem 5.1); approximation: normal
  with continuity correction, used only when n·p >= 5 and n·(1-p) >= 5 (eq. 4);
- marginal benefit (FP − FN)/n: exact by summing the trinomial (theorem D.1), here as a binomial
  mixture over S = FP + FN; approximation z = (FP − FN + 0.5 − nμ)/(σ√n) with μ = p_FP − p_FN,
  σ² = p_FP + p_FN − μ² (SPEC §3: the paper's eq. 5 drops the n);
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
from prefect import task
from prefect.cache_policies import NO_CACHE
from scipy import stats

from schemas.frames import COUNT_COLUMNS
from tasks.metrics import BINOMIAL_CELLS, JOINT_RATIO_CELLS, MARGINS

MATCH_METRICS = (*BINOMIAL_CELLS, "mb", *JOINT_RATIO_CELLS)
_WINDOW_SD = 8  # binomial mass beyond 8 standard deviations (+5) is below 1e-15


def _cells(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    return {c: frame[c].to_numpy(dtype="int64") for c in COUNT_COLUMNS}


def _mixture(n: np.ndarray, q: np.ndarray, cut, r: np.ndarray):
    """(P(X <= cut(S)), P(X >= cut(S))) with S ~ Binomial(n, q) and X | S ~ Binomial(S, r),
    summed over the window of S that holds the binomial's mass. ``cut(s)`` returns the threshold
    as an integer numerator and denominator (exact: no floating-point floor)."""
    mean, sd = n * q, np.sqrt(n * q * (1 - q))
    lo = np.floor(np.maximum(0, mean - _WINDOW_SD * sd - 5)).astype("int64")
    hi = np.ceil(np.minimum(n, mean + _WINDOW_SD * sd + 5)).astype("int64")
    width = int((hi - lo).max(initial=0)) + 1
    s = lo[:, None] + np.arange(width)[None, :]
    inside = s <= hi[:, None]
    s = np.minimum(s, n[:, None])
    weight = np.where(inside, stats.binom.pmf(s, n[:, None], q[:, None]), 0.0)
    top, bottom = cut(s)
    k = top // bottom  # floor of the threshold
    exact = top % bottom == 0  # the threshold is itself a count X can take
    below = stats.binom.cdf(k, s, r[:, None])  # P(X <= threshold)
    at = np.where(exact, stats.binom.pmf(k, s, r[:, None]), 0.0)
    # P(X >= threshold) = 1 − P(X <= floor) + P(X = threshold if it is an integer)
    return (weight * below).sum(axis=1), (weight * (1 - below + at)).sum(axis=1)


def _two_sided(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    return np.minimum(1.0, 2 * np.minimum(lower, upper))


def _binomial(k, n, p):
    lower, upper = stats.binom.cdf(k, n, p), stats.binom.sf(k - 1, n, p)
    sd = np.sqrt(n * p * (1 - p))
    valid = (n * p >= 5) & (n * (1 - p) >= 5)
    with np.errstate(divide="ignore", invalid="ignore"):
        approx = np.where(valid, stats.norm.cdf((k + 0.5 - n * p) / sd), np.nan)
    return lower, upper, approx


def _marginal_benefit(fp, fn, n, p_fp, p_fn):
    d = fp - fn
    q = p_fp + p_fn
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(q > 0, p_fp / q, 0.0)
    # D = 2·FP − S, so D <= d  <=>  FP <= (d + S)/2 (and >= likewise).
    lower, upper = _mixture(n, q, lambda s: (d[:, None] + s, np.full_like(s, 2)), r)
    mu, var = p_fp - p_fn, p_fp + p_fn - (p_fp - p_fn) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        approx = stats.norm.cdf((d + 0.5 - n * mu) / np.sqrt(var * n))
    return lower, upper, approx


def _joint_ratio(a_obs, d_obs, n, p_a, p_b):
    q = p_a + p_b
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(q > 0, p_a / q, 0.0)
    d_safe = np.maximum(d_obs, 1)[:, None]
    # M = A/S <= a_obs/d_obs  <=>  A <= a_obs·S/d_obs; only S >= 1 leaves the metric defined.
    lower, upper = _mixture(n, q, lambda s: (a_obs[:, None] * s, d_safe + 0 * s), r)
    undefined = (1 - q) ** n  # S = 0 meets both thresholds (X = 0 = 0·m): remove its mass
    defined = 1 - undefined
    with np.errstate(divide="ignore", invalid="ignore"):
        lower = (lower - undefined) / defined
        upper = (upper - undefined) / defined
        approx = stats.beta.cdf(a_obs / d_obs, n * p_a + 1, n * p_b + 1)
    return lower, upper, approx


def match_test(group: pd.DataFrame, reference: pd.DataFrame, metrics=MATCH_METRICS) -> pd.DataFrame:
    """MATCH percentiles of each group row against the aligned reference row.

    Returns the group's key columns with ``metric``, ``n``, ``percentile`` (exact),
    ``percentile_approx``, ``p_value`` (two-sided, exact) and ``undefined_reason``.
    """
    g, ref = _cells(group), _cells(reference)
    n = sum(g.values())
    n_ref = sum(ref.values())
    with np.errstate(divide="ignore", invalid="ignore"):
        p = {c: ref[c] / n_ref for c in COUNT_COLUMNS}
    keys = group.drop(columns=COUNT_COLUMNS + ["n_unlabelled"], errors="ignore").reset_index(
        drop=True
    )
    blocks = []
    for metric in metrics:
        reason = np.full(len(group), None, dtype=object)
        if metric in BINOMIAL_CELLS:
            a, b = BINOMIAL_CELLS[metric]
            lower, upper, approx = _binomial(g[a] + g[b], n, p[a] + p[b])
        elif metric == "mb":
            lower, upper, approx = _marginal_benefit(g["fp"], g["fn"], n, p["fp"], p["fn"])
        else:
            a, margin = JOINT_RATIO_CELLS[metric]
            x, y, _ = MARGINS[margin]
            b = y if a == x else x
            d_obs = g[a] + g[b]
            lower, upper, approx = _joint_ratio(g[a], d_obs, n, p[a], p[b])
            reason = np.where(d_obs == 0, f"{margin} = 0 in group", reason)
            reason = np.where(
                (d_obs > 0) & (ref[a] + ref[b] == 0), f"{margin} = 0 in reference", reason
            )
        reason = np.where(n == 0, "n = 0 in group", reason)
        reason = np.where(n_ref == 0, "empty reference", reason)
        defined = reason == None
        blocks.append(
            keys.assign(
                metric=metric,
                n=n,
                percentile=np.where(defined, lower, np.nan),
                percentile_approx=np.where(defined, approx, np.nan),
                p_value=np.where(defined, _two_sided(lower, upper), np.nan),
                undefined_reason=reason,
            )
        )
    return pd.concat(blocks, ignore_index=True)


@task(name="match", cache_policy=NO_CACHE)
def match_stage(group: pd.DataFrame, reference: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Prefect task: MATCH percentiles of every group against its reference."""
    return match_test(group, reference, [m for m in metrics if m in MATCH_METRICS])
