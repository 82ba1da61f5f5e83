"""Highest-density interval of a rate difference T = e2 − e1 (tasks.posterior), for the HDI + ROPE
decision of tasks.detection (Kruschke, "Doing Bayesian Data Analysis", 2nd ed., sections 12.1.2 and
25.2).

T's density is log-concave (a convolution of log-concave Beta densities), hence unimodal, so the
HDI of mass c is the one interval [l, u] with F_T(u) − F_T(l) = c and f_T(l) = f_T(u). Each
distinct table (tasks.posterior.distinct_tables) is solved once:

- every Beta parameter at least LARGE_POSTERIOR: the one-term Edgeworth expansion, in closed form;
- otherwise Newton's method on F_T(u) − F_T(l) = c and log f_T(u) = log f_T(l), with F_T and f_T
  by quadrature, started from that closed form (two or three evaluations for most tables) and
  accepted only when both residuals are below _MASS_TOL and _LOG_DENSITY_TOL with l < u (which, T
  being unimodal, only the HDI satisfies);
- tables where Newton does not get there (a group of a few predictions, all or none positive,
  against a large reference: T's density ends steeply, within the reference's sd): a search on
  the density level that keeps every root bracketed (_level_search), to the same tolerances.

Ends within 1e-6 of an independent reference (tests/test_detection.py: adaptive quadrature and
brentq).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from biasaudit.tasks import distributions
from biasaudit.tasks.posterior import (
    Pair,
    beta_difference,
    cdf_at,
    density_at,
    distinct_tables,
    in_chunks,
    posterior_pair,
)

# Posteriors with both Beta parameters of both groups at least this large take the HDI's
# Edgeworth approximation (_large_sample_hdi); its ends are within 3e-7 of the quadrature's there
LARGE_POSTERIOR = 5000
_MASS_TOL = 1e-10  # |F(u) − F(l) − c| accepted: moves an end by ~2e-9 sd
_LOG_DENSITY_TOL = 1e-8  # |log f(u) − log f(l)| accepted: moves an end by ~5e-9 sd
_NEWTON_STEPS = 6  # from the closed form; tables not converged by then take the bisection
_WINDOW_SD = 12.0  # the level search looks within mean ± 12 sd: masses up to 1 − 1e-6
_LEVEL_STEPS = 60  # safeguarded Newton steps on the level (bisection at worst: 60/2^60)
_CROSSING_STEPS = 100  # and on each end (bisection at worst: 24 sd/2^100)


def hdi_difference(
    x_group, n_group, x_reference, n_reference, mass=0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Narrowest interval holding ``mass`` of T = e_group − e_reference: the level set
    {f_T >= h}.

    Computed once per distinct table (in the blog's order, reference first: T = e2 − e1): a
    mirrored or swapped table's HDI is the negated, reversed interval of its representative's.
    """
    x1, n1, x2, n2 = np.broadcast_arrays(
        *(np.asarray(v, "float64") for v in (x_reference, n_reference, x_group, n_group))
    )
    tables, inverse, sign = distinct_tables(x1, n1, x2, n2)
    a1, b1 = tables[0] + 1, tables[1] - tables[0] + 1
    a2, b2 = tables[2] + 1, tables[3] - tables[2] + 1
    large = np.minimum(np.minimum(a1, b1), np.minimum(a2, b2)) >= LARGE_POSTERIOR
    low, high = (np.array(v, dtype="float64") for v in _large_sample_hdi(a1, b1, a2, b2, mass))
    if (~large).any():
        low[~large], high[~large] = in_chunks(
            partial(quadrature_hdi, mass=mass), *tables[:, ~large]
        )
    low, high = low[inverse], high[inverse]
    shape = x1.shape
    return (
        np.where(sign > 0, low, -high).reshape(shape),
        np.where(sign > 0, high, -low).reshape(shape),
    )


def _large_sample_hdi(a1, b1, a2, b2, mass):
    """HDI of T = e2 − e1 from its mean μ, sd σ and skewness γ: μ + σ(±z + γ(z² − 3)/6).

    The Edgeworth density φ(x)(1 + γ(x³ − 3x)/6) has its level set [−z + ε, z + ε] with
    ε = γ(z² − 3)/6 to first order in γ (equal density at both ends; the mass condition keeps the
    width); γ = (κ₃(e2) − κ₃(e1))/σ³ with a Beta's third cumulant 2(b − a)√(a + b + 1)/
    ((a + b + 2)√(ab))·sd³. The error is O(1/n) in units of σ."""
    m1, v1 = a1 / (a1 + b1), a1 * b1 / ((a1 + b1) ** 2 * (a1 + b1 + 1))
    m2, v2 = a2 / (a2 + b2), a2 * b2 / ((a2 + b2) ** 2 * (a2 + b2 + 1))

    def third_cumulant(a, b, v):
        return 2 * (b - a) * np.sqrt(a + b + 1) / ((a + b + 2) * np.sqrt(a * b)) * v**1.5

    sd = np.sqrt(v1 + v2)
    gamma = (third_cumulant(a2, b2, v2) - third_cumulant(a1, b1, v1)) / sd**3
    z = distributions.norm_ppf(0.5 + mass / 2)
    shift = gamma * (z * z - 3) / 6
    return m2 - m1 + sd * (-z + shift), m2 - m1 + sd * (z + shift)


def quadrature_hdi(x1, n1, x2, n2, mass) -> tuple[np.ndarray, np.ndarray]:
    """The HDI of each comparison (1-D arrays) by quadrature: Newton from the closed form, then
    bisection for the tables Newton leaves."""
    pair = posterior_pair(x1, n1, x2, n2)
    mean, var = beta_difference(x2, n2, x1, n1)
    sd = np.sqrt(var)
    start = _large_sample_hdi(x1 + 1, n1 - x1 + 1, x2 + 1, n2 - x2 + 1, mass)
    low, high = (np.clip(v, -1.0, 1.0) for v in start)
    low, high, done = _newton(pair, mass, sd, low, high)
    if not done.all():
        rest = np.flatnonzero(~done)
        low[rest], high[rest] = _level_search(pair.take(rest), mass, mean[rest], sd[rest])
    return low, high


def _newton(pair: Pair, mass, sd, low, high):
    """Newton's method on r1 = F(u) − F(l) − c, r2 = log f(u) − log f(l), with (log f)' by
    central differences; each step evaluates only the tables not yet converged. Returns the ends
    and which tables converged (the others' ends are meaningless)."""
    low, high = low.copy(), high.copy()
    done = np.zeros(low.shape, dtype=bool)
    active = np.arange(low.size)
    for step in range(_NEWTON_STEPS + 1):
        if active.size == 0:
            break
        at = pair.take(active)
        lo, hi, h = low[active], high[active], 1e-5 * sd[active]
        points = np.stack([lo - h, lo, lo + h, hi - h, hi, hi + h], axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_f = np.log(density_at(at, points))
            cdf = cdf_at(at, points[:, [1, 4]])
            r1, r2 = cdf[:, 1] - cdf[:, 0] - mass, log_f[:, 4] - log_f[:, 1]
            converged = (np.abs(r1) < _MASS_TOL) & (np.abs(r2) < _LOG_DENSITY_TOL) & (lo < hi)
            done[active[converged]] = True
            f_lo, f_hi = np.exp(log_f[:, 1]), np.exp(log_f[:, 4])
            g_lo = (log_f[:, 2] - log_f[:, 0]) / (2 * h)
            g_hi = (log_f[:, 5] - log_f[:, 3]) / (2 * h)
            # Jacobian [[−f(l), f(u)], [−g(l), g(u)]]
            det = -f_lo * g_hi + f_hi * g_lo
            lo = lo - (g_hi * r1 - f_hi * r2) / det
            hi = hi - (g_lo * r1 - f_lo * r2) / det
        moving = ~converged & np.isfinite(lo) & np.isfinite(hi) & (lo > -1) & (lo < hi) & (hi < 1)
        if step == _NEWTON_STEPS:
            break
        low[active[moving]], high[active[moving]] = lo[moving], hi[moving]
        active = active[moving]
    return low, high, done


def _log_density(pair: Pair, tau):
    """log f_T at τ of shape (m, k)."""
    with np.errstate(divide="ignore"):
        return np.log(density_at(pair, tau))


def _level_search(pair: Pair, mass, mean, sd):
    """Safeguarded Newton on the log level λ of the HDI: for each λ, its ends l(λ) < mode < u(λ)
    where log f_T = λ (log f_T rises to the mode and falls after it; each end by safeguarded
    Newton, _crossing), and F(u) − F(l) − c, whose slope in λ is e^λ(1/g(u) − 1/g(l)) with g the
    slope of log f_T at the end. Every step keeps the root bracketed (by the levels with too much
    and too little mass, and for each end by the ends at those levels), bisecting where Newton
    would leave the bracket. T within mean ± _WINDOW_SD sd."""
    left = np.maximum(mean - _WINDOW_SD * sd, -1.0)
    right = np.minimum(mean + _WINDOW_SD * sd, 1.0)
    h = 1e-5 * sd
    mode = _mode(pair, left, right)
    top = _log_density(pair, mode[:, None])[:, 0]
    below, above = top - 30.0, top  # levels with too much and too little mass
    outer_low, inner_low, inner_high, outer_high = left, mode, mode, right
    z = distributions.norm_ppf(0.5 + mass / 2)
    level = top - z * z / 2  # a Gaussian's HDI
    finished = np.zeros(top.shape, dtype=bool)
    ends = np.zeros((len(top), 2))
    for _ in range(_LEVEL_STEPS):
        low, slope_low = _crossing(pair, level, outer_low, inner_low, h)
        high, slope_high = _crossing(pair, level, outer_high, inner_high, h)
        cdf = cdf_at(pair, np.stack([low, high], axis=-1))
        excess = cdf[:, 1] - cdf[:, 0] - mass
        ends[~finished] = np.stack([low, high], axis=-1)[~finished]
        finished |= np.abs(excess) < _MASS_TOL
        if finished.all():
            break
        enough = excess >= 0
        below, above = np.where(enough, level, below), np.where(enough, above, level)
        outer_low, inner_low = np.where(enough, low, outer_low), np.where(enough, inner_low, low)
        outer_high = np.where(enough, high, outer_high)
        inner_high = np.where(enough, inner_high, high)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            step = excess / (np.exp(level) * (1 / slope_high - 1 / slope_low))
        level = np.where(finished, level, _inside(level - step, below, above))
    return ends[:, 0], ends[:, 1]


def _crossing(pair: Pair, level, outer, inner, h):
    """The τ between ``outer`` (log f_T < ``level``) and ``inner`` (>=) where log f_T crosses
    ``level``, and log f_T's slope there: safeguarded Newton with the slope by central
    differences (step ``h``), to |log f_T − level| < _LOG_DENSITY_TOL / 10 or a bracket of 1e-7 h.
    """
    tau = (outer + inner) / 2
    for _ in range(_CROSSING_STEPS):
        values = _log_density(pair, tau[:, None] + np.stack([-h, 0 * h, h], axis=-1))
        with np.errstate(invalid="ignore"):  # −inf − (−inf) where f_T underflows
            gap, slope = values[:, 1] - level, (values[:, 2] - values[:, 0]) / (2 * h)
        done = (np.abs(gap) < _LOG_DENSITY_TOL / 10) | (np.abs(inner - outer) < 1e-7 * h)
        if done.all():
            break
        up = gap >= 0
        outer, inner = np.where(up, outer, tau), np.where(up, tau, inner)
        with np.errstate(divide="ignore", invalid="ignore"):
            newton = tau - gap / slope
        tau = np.where(done, tau, _inside(newton, outer, inner))
    return tau, slope


def _inside(x, a, b):
    """x where it lies strictly between a and b (either order), else their midpoint."""
    inside = np.isfinite(x) & (np.minimum(a, b) < x) & (x < np.maximum(a, b))
    return np.where(inside, x, (a + b) / 2)


def _mode(pair: Pair, left, right):
    """The mode of f_T in [left, right] to 1e-6 of that width: log f_T on 9 points, then on 9
    points between the highest one's neighbours (f_T is unimodal), 9 times over."""
    index = np.arange(len(left))
    for _ in range(9):  # each shrinks the interval by 4.5
        tau = left[:, None] + (right - left)[:, None] * np.linspace(0.0, 1.0, 9)
        best = np.argmax(_log_density(pair, tau), axis=-1)
        left, right = tau[index, np.maximum(best - 1, 0)], tau[index, np.minimum(best + 1, 8)]
    return tau[index, best]
