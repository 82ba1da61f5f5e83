"""Planning stage: how many predictions an audit needs to see a disparity, and whether it has them.

Two sources:

- Bias as a sample size (Ivrissimtzis et al., "Measures of classification bias derived from sample
  size analysis", eq. 1): for error rates e1, e2 of two groups,
  N = ½·((z_{1−α} + z_{1−β}) / (asin√e1 − asin√e2))², the size of each of two equal groups a test of
  e1 = e2 needs; larger N means less bias, and N is infinite when e1 = e2. It equals statsmodels'
  NormalIndPower with Cohen's h, ratio 1, alternative "larger". Section 5's k-group extension: the
  per-group size of the chi-square test of homogeneity, from the noncentral chi-square with Cohen's
  w² = Σ_g (1/k)(e_g − ē)²/(ē(1 − ē)), df = k − 1.
- Sample size of an audit ("A Brief Tutorial on Sample Size Calculations for Fairness Audits",
  eqs. 1-3): unfairness U = M_1 − M_2,
  H0: U <= U_tol; total n = (z_{1−α/2} + z_{1−β})²·(σ²_1/p_1 + σ²_2/(1 − p_1))/(τ − U_tol)² for group
  shares p_1, 1 − p_1, minimised by the Neyman allocation p_1 = σ_1/(σ_1 + σ_2), where
  n = ((z_{1−α/2} + z_{1−β})(σ_1 + σ_2)/(τ − U_tol))². σ²_g are per-observation variances of the
  metric (group_variance); achieved power Φ((τ − U_tol)/σ_U − z_{1−α/2}).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from biasaudit.schemas.config import PlanningPower
from biasaudit.schemas.results import COMPARISON_KEY
from biasaudit.tasks import distributions
from biasaudit.tasks.twosample import GAMMA
from biasaudit.tasks.twosample_power import (
    NORMAL_LEVEL,
    NORMAL_SKEW,
    exact_powers,
    normal_power,
    skewness_term,
)

PRECISION = 1e-4  # detection_power: the critical statistics' precision (tasks.twosample)
OUTSIDE = 1e-7  # detection_power: each group's counts left out beyond these binomial quantiles


def _z(q):
    return distributions.norm_ppf(q)


def arcsine_sample_size(
    e1, e2, alpha=0.05, power=0.90, alternative: Literal["one-sided", "two-sided"] = "one-sided"
):
    """The bias measure N of eq. 1 per group, unrounded (inf where e1 = e2).

    The paper's tables use the one-sided z_{1−α}, α = 0.05, power 0.90; ``two-sided`` uses
    z_{1−α/2}.
    """
    if alternative not in ("one-sided", "two-sided"):
        raise ValueError(f"alternative must be 'one-sided' or 'two-sided', not {alternative!r}")
    z_alpha = _z(1 - alpha) if alternative == "one-sided" else _z(1 - alpha / 2)
    gap = np.arcsin(np.sqrt(np.asarray(e1, float))) - np.arcsin(np.sqrt(np.asarray(e2, float)))
    with np.errstate(divide="ignore"):
        return 0.5 * ((z_alpha + _z(power)) / gap) ** 2


def chi_square_sample_size(rates, alpha=0.05, power=0.90) -> float:
    """Per-group size for the chi-square test of homogeneity of k rates (paper's section 5).

    Solves P(ncx2(k − 1, λ) > χ²_{1−α, k−1}) = power for the noncentrality λ = k·n·w².
    """
    from scipy import optimize, stats  # here only: an audit does not pay their import

    rates = np.asarray(rates, dtype=float)
    k, mean = rates.size, rates.mean()
    w2 = np.mean((rates - mean) ** 2) / (mean * (1 - mean))
    if k < 2 or w2 < 1e-15:  # equal rates (up to rounding): no test can tell them apart
        return float("inf")
    critical = stats.chi2.ppf(1 - alpha, k - 1)
    lam = optimize.brentq(lambda nc: stats.ncx2.sf(critical, k - 1, nc) - power, 1e-9, 1e7)
    return lam / (k * w2)


@dataclass(frozen=True)
class Allocation:
    """Total sample size n and the share p1 of it that goes to group 1 (n1 = p1·n)."""

    n: np.ndarray
    p1: np.ndarray

    @property
    def n1(self):
        return self.n * self.p1

    @property
    def n2(self):
        return self.n * (1 - self.p1)


def allocation_sample_size(var1, var2, tau, p1, u_tol=0.0, level=0.05, power=0.80) -> Allocation:
    """Total n for group shares (p1, 1 − p1) for the two-sided test at ``level``: eq. 2 of the
    audit tutorial (inf where τ <= U_tol)."""
    var1, var2, tau, p1 = (np.asarray(v, float) for v in (var1, var2, tau, p1))
    z = _z(1 - level / 2) + _z(power)
    effect = tau - u_tol
    with np.errstate(divide="ignore", invalid="ignore"):
        n = z**2 * (var1 / p1 + var2 / (1 - p1)) / effect**2
    return Allocation(np.where(effect > 0, n, np.inf), p1)


def neyman_sample_size(var1, var2, tau, u_tol=0.0, level=0.05, power=0.80) -> Allocation:
    """Total n under the Neyman allocation p1 = σ1/(σ1 + σ2), the smallest over all allocations."""
    s1, s2 = np.sqrt(np.asarray(var1, float)), np.sqrt(np.asarray(var2, float))
    with np.errstate(divide="ignore", invalid="ignore"):
        p1 = np.where(s1 + s2 > 0, s1 / (s1 + s2), 0.5)
    return allocation_sample_size(var1, var2, tau, p1, u_tol, level, power)


def group_variance(metric: str, value, prev=None, ppr=None):
    """Per-observation variance σ²_M of a group metric (the audit tutorial's table 1, with PPV and
    NPV by the delta method: the table's TPR and TNR variances there are a slip).

    ppr: PPR(1−PPR); tpr, fnr: M(1−M)/PREV; tnr, fpr: M(1−M)/(1−PREV); ppv: PPV(1−PPV)/PPR
    (the paper prints TPR(1−TPR) here, a slip the delta method corrects); npv: NPV(1−NPV)/(1−PPR)
    (likewise); acc: ACC(1−ACC).
    """
    value = np.asarray(value, float)
    base = value * (1 - value)
    share = {
        "ppr": 1.0,
        "acc": 1.0,
        "tpr": prev,
        "fnr": prev,
        "tnr": None if prev is None else 1 - np.asarray(prev, float),
        "fpr": None if prev is None else 1 - np.asarray(prev, float),
        "ppv": ppr,
        "npv": None if ppr is None else 1 - np.asarray(ppr, float),
    }
    if metric not in share:
        raise ValueError(f"no variance formula for {metric!r}; known: {sorted(share)}")
    if share[metric] is None:
        raise ValueError(
            f"{metric} needs {'prev' if metric in ('tpr', 'fnr', 'tnr', 'fpr') else 'ppr'}"
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        return base / np.asarray(share[metric], float)


def variance_from_counts(numerator, denominator, n):
    """σ²_M = M(1 − M)·n/d for a rate M = numerator/d among n predictions: the table's formulas
    for every rate metric at once (d/n is the share that PREV, 1 − PREV, PPR, ... stand for)."""
    numerator, denominator, n = (np.asarray(v, float) for v in (numerator, denominator, n))
    with np.errstate(divide="ignore", invalid="ignore"):
        m = numerator / denominator
        return m * (1 - m) * n / denominator


def achieved_power(tau, var1, n1, var2, n2, u_tol=0.0, level=0.05):
    """Power of the audit test at ``level`` with the groups at hand: Φ((τ − U_tol)/σ_U −
    z_{1−level/2})."""
    with np.errstate(divide="ignore", invalid="ignore"):
        sigma_u = np.sqrt(np.asarray(var1, float) / n1 + np.asarray(var2, float) / n2)
        return distributions.norm_cdf(
            (np.asarray(tau, float) - u_tol) / sigma_u - _z(1 - level / 2)
        )


def detection_power(
    p_group,
    d_group,
    p_reference,
    d_reference,
    tolerance: float,
    level: float,
    method: PlanningPower = "auto",
) -> tuple[np.ndarray, np.ndarray]:
    """Power of detection's two-sided test (tasks.twosample) at true rates, and how each was
    computed ('limit' or 'exact'; power 0 where a denominator is zero).

    'exact' (tasks.twosample_power.exact_powers): the binomial sum over the Berger-Boos test's
    rejection region, the same test at every size, all comparisons at once, its critical
    statistics to PRECISION and each group's counts beyond its binomial quantiles at OUTSIDE
    left out (the power low by at most the mass of tables within PRECISION above a critical
    statistic, plus 4·OUTSIDE: against 1e-6 and 1e-13, at most 2.0e-7 on COMPAS and 8.7e-5 on an
    audit of 642 groups; a power within 1e-6 of one is its lower bound from the tables whose
    intervals lie in H1, low by at most 1e-6). ``method`` 'auto': 'limit' (normal_power at the
    test's level/2 − γ per side, the same tolerance) where the skewness term is at most NORMAL_SKEW
    and the level at least NORMAL_LEVEL, where on the grid of benchmarks/planning_accuracy.py it
    is within 0.005 of the exact power (a check on a grid, not a proof), else 'exact'. The side
    whose null holds at the true rates is left out: it adds at most level/2, the test's size there.
    """
    if method not in ("auto", "exact"):
        raise ValueError(f"method must be 'auto' or 'exact', not {method!r}")
    arrays = np.broadcast_arrays(
        *(np.asarray(v, dtype="float64") for v in (p_group, d_group, p_reference, d_reference))
    )
    p_g, d_g, p_r, d_r = (a.ravel() for a in arrays)
    power = np.zeros(len(p_g))
    tested = (d_g > 0) & (d_r > 0)
    normal = tested & (method == "auto") & (level >= NORMAL_LEVEL)
    normal[normal] = (
        skewness_term(d_g[normal], d_r[normal], p_g[normal], p_r[normal], tolerance, level)
        <= NORMAL_SKEW
    )
    power[normal] = normal_power(
        p_g[normal],
        d_g[normal],
        p_r[normal],
        d_r[normal],
        tolerance,
        level,
        null_sides=False,
        gamma=GAMMA,
    )
    exact = tested & ~normal
    power[exact] = exact_powers(
        d_g[exact],
        d_r[exact],
        p_g[exact],
        p_r[exact],
        tolerance,
        level,
        null_sides=False,
        precision=PRECISION,
        outside=OUTSIDE,
    )
    shape = arrays[0].shape
    return power.reshape(shape), np.where(normal, "limit", "exact").reshape(shape)


def _verdict(tested: bool, achieved: float, factor: float, power: float) -> str:
    """'enough data' when detection's test has the power, else by how much data falls short."""
    if not tested:
        return "not tested"
    if achieved >= power:
        return "enough data"
    if np.isfinite(factor) and factor > 1:
        return "underpowered by a factor " + (f"{factor:.1f}" if factor < 1e6 else f"{factor:.2g}")
    return f"underpowered (power {achieved:.2f})"


def plan(
    rates: pd.DataFrame,
    *,
    tau: float,
    alpha: float,
    power: float,
    tolerance: float = 0.0,
    planning_power: PlanningPower = "auto",
) -> pd.DataFrame:
    """Power of detection's test, and predictions needed, for every rate metric of every comparison.

    ``rates`` are the comparisons' rate counts (tasks.rates.comparison_rates), shared with
    detection. Group 1 is the reference, group 2 the group; U = M_group − M_reference. The test is the one
    detection runs, so the power is that of the decision the audit makes: H1: |U| > tolerance,
    two-sided, at the level the multiplicity procedure demands of a lone discovery, α/m for the m
    comparisons detection tests (Benjamini-Hochberg's threshold for its first rejection), with
    the same variance. τ is the configured disparity worth detecting, in either direction: the
    reported power is the smaller of the powers at M_group = M_reference ± τ. Rates are floored
    for the variance, M = (x + 1/2)/(d + 1), so a group of one or two is never "enough data".
    ``needed`` is the total n of both groups at their actual shares (audit tutorial eq. 2 at the
    same level and tolerance), ``needed_neyman`` under the Neyman allocation; ``bias_n`` is the
    bias measure N of eq. 1 of the observed rates (one-sided, at α and power) beside the
    difference and the ratio. Comparisons detection does not test carry its ``reason``.
    ``planning_power``: detection_power's ``method`` ('auto', or 'exact' for every comparison);
    each row's ``power_method`` says how its power was computed.
    """
    if tau is None or not tolerance < tau <= 1:
        raise ValueError(f"tau must be a configured disparity in (tolerance, 1], not {tau!r}")
    x2, d2 = rates["numerator_group"].to_numpy(), rates["denominator_group"].to_numpy()
    x1, d1 = rates["numerator_reference"].to_numpy(), rates["denominator_reference"].to_numpy()
    n2, n1 = rates["size_group"].to_numpy(), rates["size_reference"].to_numpy()
    reason = rates["reason"].to_numpy(dtype=object)
    tested = pd.isna(reason)
    family = max(int(tested.sum()), 1)
    level = alpha / family
    with np.errstate(divide="ignore", invalid="ignore"):
        m2, m1 = x2 / d2, x1 / d1
        ratio = np.where(m1 > 0, m2 / m1, np.nan)
    floor1 = (x1 + 0.5) / (d1 + 1)
    up, down = np.minimum(floor1 + tau, 1.0), np.maximum(floor1 - tau, 0.0)
    # both targets in one call: they share each comparison's critical statistics
    both, methods = detection_power(
        np.stack([up, down]), np.stack([d2, d2]), floor1, d1, tolerance, level, planning_power
    )
    powers, needs, neymans = [], [], []
    for target, pw in zip((up, down), both):
        feasible = np.abs(target - floor1) >= tau - 1e-12
        powers.append(np.where(feasible, pw, np.inf))
        # per-observation variances σ²_M = M(1 − M)·n/d (the tutorial's table 1 for every rate)
        with np.errstate(divide="ignore", invalid="ignore"):
            var2 = target * (1 - target) * n2 / d2
            var1 = floor1 * (1 - floor1) * n1 / d1
        share1 = n1 / (n1 + n2)
        needs.append(
            np.where(
                feasible,
                allocation_sample_size(var1, var2, tau, share1, tolerance, level, power).n,
                -np.inf,
            )
        )
        neymans.append(neyman_sample_size(var1, var2, tau, tolerance, level, power))
    lower = powers[1] < powers[0]
    achieved = np.where(lower, powers[1], powers[0])
    method = np.where(lower, methods[1], methods[0])
    needed = np.maximum(needs[0], needs[1])
    neyman = np.where(needs[1] > needs[0], neymans[1].n, neymans[0].n)
    neyman_share = np.where(needs[1] > needs[0], 1 - neymans[1].p1, 1 - neymans[0].p1)
    available = n1 + n2
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = needed / available
    verdict = np.array(
        [_verdict(t, pw, f, power) for t, pw, f in zip(tested, achieved, factor)], dtype=str
    )  # str even when there is no comparison at all

    def shown(values):
        return np.where(tested, values, np.nan)

    return rates[COMPARISON_KEY].assign(
        value_group=m2,
        value_reference=m1,
        difference=m2 - m1,
        ratio=ratio,
        tau=tau,
        tolerance=tolerance,
        alpha=alpha,
        size_group=n2,
        size_reference=n1,
        denominator_group=d2,
        denominator_reference=d1,
        level=shown(np.full(len(rates), level)),
        needed=shown(needed),
        needed_neyman=shown(neyman),
        neyman_share_group=shown(neyman_share),
        achieved_power=shown(achieved),
        power_method=np.where(tested, method, None),
        verdict=verdict,
        bias_n=arcsine_sample_size(m1, m2, alpha, power),
        reason=reason,
    )


def plan_from_rates(
    metric: str,
    rates: list[float],
    prev: list[float] | None = None,
    ppr: list[float] | None = None,
    tau: float | None = None,
    alpha: float = 0.05,
    power: float = 0.80,
) -> dict:
    """Before any data: predictions to collect per group, from rates a user expects.

    Two rates: equal and Neyman allocations of the audit test (τ defaults to their difference),
    and the bias measure N (per group, one-sided). More than two: the per-group size of the
    k-group chi-square test, and the two-group plan for the most extreme pair.
    """
    rates_arr = np.asarray(rates, float)
    if rates_arr.size < 2:
        raise ValueError("give at least two rates")
    low, high = int(np.argmin(rates_arr)), int(np.argmax(rates_arr))
    pair = [low, high] if rates_arr.size > 2 else [0, 1]
    r1, r2 = rates_arr[pair]

    def pick(values):
        return None if values is None else np.asarray(values, float)[pair]

    p, q = pick(prev), pick(ppr)
    var1 = group_variance(metric, r1, None if p is None else p[0], None if q is None else q[0])
    var2 = group_variance(metric, r2, None if p is None else p[1], None if q is None else q[1])
    effect = abs(r2 - r1) if tau is None else tau
    equal = allocation_sample_size(var1, var2, effect, 0.5, 0.0, alpha, power)
    neyman = neyman_sample_size(var1, var2, effect, 0.0, alpha, power)
    result = {
        "groups compared": pair,
        "tau": effect,
        "variances": (float(var1), float(var2)),
        "equal allocation": (float(equal.n1), float(equal.n2)),
        "neyman allocation": (float(neyman.n1), float(neyman.n2)),
        "bias measure N per group": float(arcsine_sample_size(r1, r2, alpha, power)),
        "difference": float(r2 - r1),
        "ratio": float(r2 / r1) if r1 > 0 else float("nan"),
    }
    if rates_arr.size > 2:
        result["chi-square per group"] = chi_square_sample_size(rates_arr, alpha, power)
    return result


def rank_bias(table: pd.DataFrame, alpha: float = 0.05, power: float = 0.90) -> pd.DataFrame:
    """Rank models for bias by difference, ratio and N, as the bias-measure paper's tables do.

    ``table`` has one row per model with the rates ``value_group`` and ``value_reference`` (the
    paper's e2 and e1). Adds D = |e2 − e1| and R = max/min (rank 1 = least biased: smallest D,
    smallest R) and the bias measure N, ``bias_n`` (rank 1 = largest N), and ``disagree`` where
    the three ranks are not all equal.
    """
    e2, e1 = table["value_group"].to_numpy(float), table["value_reference"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.maximum(e1, e2) / np.minimum(e1, e2)
    out = table.assign(
        difference=np.abs(e2 - e1),
        ratio=ratio,
        bias_n=arcsine_sample_size(e1, e2, alpha, power),
    )
    out["rank_difference"] = out["difference"].rank(method="min").astype(int)
    out["rank_ratio"] = out["ratio"].rank(method="min").astype(int)
    out["rank_bias_n"] = out["bias_n"].rank(method="min", ascending=False).astype(int)
    ranks = out[["rank_difference", "rank_ratio", "rank_bias_n"]]
    return out.assign(disagree=ranks.nunique(axis=1) > 1)
