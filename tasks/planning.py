"""Planning stage: how many predictions an audit needs to see a disparity, and whether it has them.

Two sources (SPEC section 2):

- Bias as a sample size (sample-size-bias-measure.txt, eq. 1): for error rates e1, e2 of two groups,
  N = ½·((z_{1−α} + z_{1−β}) / (asin√e1 − asin√e2))², the size of each of two equal groups a test of
  e1 = e2 needs; larger N means less bias, and N is infinite when e1 = e2. It equals statsmodels'
  NormalIndPower with Cohen's h, ratio 1, alternative "larger". Section 5's k-group extension: the
  per-group size of the chi-square test of homogeneity, from the noncentral chi-square with Cohen's
  w² = Σ_g (1/k)(e_g − ē)²/(ē(1 − ē)), df = k − 1.
- Sample size of an audit (sample-size-fairness-audits.txt, eqs. 1-3): unfairness U = M_1 − M_2,
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
from scipy import optimize, stats


def _z(q):
    return stats.norm.ppf(q)


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


def allocation_sample_size(var1, var2, tau, p1, u_tol=0.0, alpha=0.05, power=0.80) -> Allocation:
    """Total n for group shares (p1, 1 − p1): eq. 2 of the audit tutorial (inf where τ <= U_tol)."""
    var1, var2, tau, p1 = (np.asarray(v, float) for v in (var1, var2, tau, p1))
    z = _z(1 - alpha / 2) + _z(power)
    effect = tau - u_tol
    with np.errstate(divide="ignore", invalid="ignore"):
        n = z**2 * (var1 / p1 + var2 / (1 - p1)) / effect**2
    return Allocation(np.where(effect > 0, n, np.inf), p1)


def neyman_sample_size(var1, var2, tau, u_tol=0.0, alpha=0.05, power=0.80) -> Allocation:
    """Total n under the Neyman allocation p1 = σ1/(σ1 + σ2), the smallest over all allocations."""
    s1, s2 = np.sqrt(np.asarray(var1, float)), np.sqrt(np.asarray(var2, float))
    with np.errstate(divide="ignore", invalid="ignore"):
        p1 = np.where(s1 + s2 > 0, s1 / (s1 + s2), 0.5)
    return allocation_sample_size(var1, var2, tau, p1, u_tol, alpha, power)


def group_variance(metric: str, value, prev=None, ppr=None):
    """Per-observation variance σ²_M of a group metric (the audit tutorial's table 1, as SPEC fixes it).

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


def achieved_power(tau, var1, n1, var2, n2, u_tol=0.0, alpha=0.05):
    """Power of the audit test with the groups at hand: Φ((τ − U_tol)/σ_U − z_{1−α/2})."""
    with np.errstate(divide="ignore", invalid="ignore"):
        sigma_u = np.sqrt(np.asarray(var1, float) / n1 + np.asarray(var2, float) / n2)
        return stats.norm.cdf((np.asarray(tau, float) - u_tol) / sigma_u - _z(1 - alpha / 2))


def plan(
    group: pd.DataFrame,
    reference: pd.DataFrame,
    pair: tuple[pd.DataFrame, pd.DataFrame],
    tau: float | None,
    alpha: float,
    power: float,
) -> pd.DataFrame:
    """Needed against available predictions for every rate metric of every comparison.

    ``group`` and ``reference`` are the comparisons' aligned counts, ``pair`` their rate metrics
    (tasks.metrics.pair_metrics).

    Group 1 is the reference, group 2 the group; U = M_group − M_reference. τ is the configured
    disparity to detect, or the observed |U| when none is configured. ``needed`` is the total n of
    both groups at their actual shares, ``needed_neyman`` under the Neyman allocation; the verdict
    compares ``needed`` with the predictions available. ``bias_n`` is the bias measure N of eq. 1
    (one-sided, at the audit's α and power) beside the difference and the ratio.
    """
    keys = ["attribute", "group_name", "reference"]
    mine, theirs = pair
    rates = mine["metric"].unique()
    cells = ["tp", "fp", "fn", "tn"]
    n2 = np.tile(group[cells].sum(axis=1).to_numpy(float), len(rates))
    n1 = np.tile(reference[cells].sum(axis=1).to_numpy(float), len(rates))
    m2, m1 = mine["value"].to_numpy(), theirs["value"].to_numpy()
    var2 = variance_from_counts(mine["numerator"], mine["denominator"], n2)
    var1 = variance_from_counts(theirs["numerator"], theirs["denominator"], n1)
    disparity = m2 - m1
    effect = np.abs(disparity) if tau is None else np.full_like(disparity, tau)
    needed = allocation_sample_size(var1, var2, effect, n1 / (n1 + n2), 0.0, alpha, power).n
    neyman = neyman_sample_size(var1, var2, effect, 0.0, alpha, power)
    available = n1 + n2
    defined = np.isfinite(needed) & np.isfinite(m1) & np.isfinite(m2)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = needed / available
        ratio = np.where(m1 > 0, m2 / m1, np.nan)
    verdict = np.where(
        ~defined,
        np.where(effect == 0, "no disparity to detect", "undefined metric"),
        np.where(
            factor <= 1,
            "enough data",
            np.char.add("underpowered by a factor ", np.char.mod("%.1f", np.nan_to_num(factor))),
        ),
    )
    return mine[keys + ["metric"]].assign(
        value_group=m2,
        value_reference=m1,
        disparity=disparity,
        ratio=ratio,
        tau=effect,
        n_group=n2,
        n_reference=n1,
        needed=np.where(defined, needed, np.nan),
        needed_neyman=np.where(defined, neyman.n, np.nan),
        neyman_share_group=np.where(defined, 1 - neyman.p1, np.nan),
        achieved_power=np.where(
            defined, achieved_power(effect, var1, n1, var2, n2, 0.0, alpha), np.nan
        ),
        verdict=verdict,
        bias_n=arcsine_sample_size(m1, m2, alpha, power),
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

    ``table`` has one row per model with error rates ``e1`` and ``e2`` of the two groups. Adds
    D = |e2 − e1| and R = max/min (rank 1 = least biased: smallest D, smallest R) and the bias
    measure N (rank 1 = largest N), and ``disagree`` where the three ranks are not all equal.
    """
    e1, e2 = table["e1"].to_numpy(float), table["e2"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.maximum(e1, e2) / np.minimum(e1, e2)
    out = table.assign(
        difference=np.abs(e2 - e1), ratio=ratio, n=arcsine_sample_size(e1, e2, alpha, power)
    )
    out["rank_difference"] = out["difference"].rank(method="min").astype(int)
    out["rank_ratio"] = out["ratio"].rank(method="min").astype(int)
    out["rank_n"] = out["n"].rank(method="min", ascending=False).astype(int)
    ranks = out[["rank_difference", "rank_ratio", "rank_n"]]
    return out.assign(disagree=ranks.nunique(axis=1) > 1)
