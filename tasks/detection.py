"""Detection stage: is a group's disparity real, in which direction, and how sure are we?

Bayesian rate difference ("How to detect algorithmic bias in production"): with x_i outcomes among
n_i in group i and a uniform prior, e_i ~ Beta(x_i + 1, n_i − x_i + 1), independent, and
T = e2 − e1 (group 2 minus group 1). Three decision rules from the blog:

- simple rule: bias toward group 2 when μ − zσ > t, toward group 1 when μ + zσ < −t;
- probability of deviation p = P(T > t) + P(T < −t), flagged when p > c (algorithm 2), computed
  by numerical integration of the density (the blog's closed-form CDF has a sign slip: it gives
  P(e1 − e2 ≤ t), not P(T > t));
- HDI + ROPE: the narrowest interval holding mass c of T's density against ROPE = [−t, t],
  decided as Kruschke does (entirely outside: biased; entirely inside: fair; else undecided). The
  blog's step 3 states the overlap test loosely; this three-way decision is the one implemented.

The frequentist test is the audit tutorial's ("A Brief Tutorial on Sample Size Calculations for
Fairness Audits", eqs. 1-3):
z = (Û − U_tol)/σ̂_U with σ̂²_U = M̂_1(1 − M̂_1)/d_1 + M̂_2(1 − M̂_2)/d_2 for rate metrics with
denominator counts d_g, with the Agresti-Caffo adjustment, tested in both directions at α/2 each:
Berger-Boos exact at every size (tasks.twosample: the supremum over a confidence set for the
nuisance rate, plus its error γ), so its size is at most α at every n. Benjamini-Hochberg across
all tested rows (tasks.multiplicity).

Quadrature is vectorised over groups (in blocks, to bound memory): every integral runs over the
narrower of the two posteriors (between its 1e-14 and 1 − 1e-14 quantiles) with fixed
Gauss-Legendre panels; the other posterior enters through its CDF or density, smooth on that scale.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
from scipy import special, stats

from biasaudit.tasks.multiplicity import bh_adjust
from biasaudit.tasks.twosample import two_sample_test

_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(40)
_GRID_NODES, _GRID_WEIGHTS = np.polynomial.legendre.leggauss(40)
_WINDOW_SD = 10.0  # half-width, in sd, of the Gaussian-approximated integrand of the HDI grid
_TAIL = 1e-14
_GRID = 201  # points of T's density for the HDI, over its mean ± _HDI_SD sd
_HDI_SD = 7.0  # T within mean ± 7 sd: room for HDIs of mass up to 0.9999
_NEWTON_STEPS = 4  # Newton steps that take the grid's HDI (error ~1e-4) to 1e-9


def _params(x, n):
    x, n = np.asarray(x, dtype="float64"), np.asarray(n, dtype="float64")
    return x + 1, n - x + 1


def _beta_moments(a, b):
    mean = a / (a + b)
    return mean, a * b / ((a + b) ** 2 * (a + b + 1))


def beta_difference(x1, n1, x2, n2) -> tuple[np.ndarray, np.ndarray]:
    """Exact posterior mean and variance of T = e2 − e1 under uniform priors.

    Mean (x2+1)/(n2+2) − (x1+1)/(n1+2), the blog's closed form; variance the sum of the two Beta
    variances a·b/((a+b)²(a+b+1)), which the blog's long polynomial equals.
    """
    m1, v1 = _beta_moments(*_params(x1, n1))
    m2, v2 = _beta_moments(*_params(x2, n2))
    return m2 - m1, v1 + v2


def _narrow_and_wide(x1, n1, x2, n2):
    """Beta parameters of the narrower posterior, of the wider one, and the sign s with
    T = s·(e_wide − e_narrow)."""
    a1, b1 = _params(x1, n1)
    a2, b2 = _params(x2, n2)
    a1, b1, a2, b2 = np.broadcast_arrays(a1, b1, a2, b2)
    first_narrow = _beta_moments(a1, b1)[1] <= _beta_moments(a2, b2)[1]
    narrow = (np.where(first_narrow, a1, a2), np.where(first_narrow, b1, b2))
    wide = (np.where(first_narrow, a2, a1), np.where(first_narrow, b2, b1))
    return narrow, wide, np.where(first_narrow, 1.0, -1.0)


def _bulk(a, b):
    """Interval holding all but 2e-14 of Beta(a, b)'s mass (quantiles: right for skewed tails)."""
    return stats.beta.ppf(_TAIL, a, b), stats.beta.isf(_TAIL, a, b)


def _panels(a, b, t):
    """Three Gauss-Legendre panels over Beta(a, b)'s bulk, split where the integrand of
    prob_deviation has kinks (e = t and e = 1 − t, where e ± t leaves [0, 1])."""
    lo, hi = _bulk(a, b)
    cuts = np.sort(np.stack([np.clip(t, lo, hi), np.clip(1 - t, lo, hi)], axis=-1), axis=-1)
    edges = np.concatenate([lo[..., None], cuts, hi[..., None]], axis=-1)
    left, right = edges[..., :-1, None], edges[..., 1:, None]
    nodes = left + (right - left) * (_NODES + 1) / 2
    weights = (right - left) / 2 * _WEIGHTS
    shape = (*a.shape, 3 * len(_NODES))
    return nodes.reshape(shape), weights.reshape(shape)


def _log_pdf(e, a, b, log_norm=None):
    """log Beta(a, b) density at e; pass ``log_norm`` = betaln(a, b) when it is already known."""
    log_norm = special.betaln(a, b) if log_norm is None else log_norm
    e = np.clip(e, 1e-300, 1 - 1e-16)  # keeps 0·log(0) at 0 where a or b is 1
    return (a - 1) * np.log(e) + (b - 1) * np.log1p(-e) - log_norm


_CHUNK = 256  # comparisons per block: keeps the (block, grid, nodes) arrays in cache-sized memory


def _in_chunks(function, *arrays):
    """Apply ``function`` to blocks of _CHUNK broadcast elements and stitch the results back."""
    broadcast = np.broadcast_arrays(*(np.asarray(a, "float64") for a in arrays))
    shape = broadcast[0].shape
    flat = [a.ravel() for a in broadcast]
    size = flat[0].size
    parts = [function(*(a[i : i + _CHUNK] for a in flat)) for i in range(0, max(size, 1), _CHUNK)]
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(p)[:size].reshape(shape) for p in zip(*parts))
    return np.concatenate(parts)[:size].reshape(shape)


def prob_deviation(x1, n1, x2, n2, t) -> np.ndarray:
    """P(|e2 − e1| > t) = ∫ f_N(e)[1 − F_W(e + t) + F_W(e − t)] de (the blog's algorithm 2).

    The identity holds whichever of the two posteriors is the narrow one N, so the integral always
    runs over the narrower. Accurate to better than 1e-6 (checked against scipy.integrate.quad).
    """
    return _in_chunks(_prob_deviation, x1, n1, x2, n2, t)


def _prob_deviation(x1, n1, x2, n2, t):
    (an, bn), (aw, bw), _ = _narrow_and_wide(x1, n1, x2, n2)
    t = np.broadcast_to(np.asarray(t, dtype="float64"), an.shape)
    e, w = _panels(an, bn, t)
    t = t[..., None]
    density = np.exp(_log_pdf(e, an[..., None], bn[..., None]))
    aw, bw = aw[..., None], bw[..., None]
    outside = stats.beta.sf(np.minimum(e + t, 1.0), aw, bw) + stats.beta.cdf(
        np.maximum(e - t, 0.0), aw, bw
    )
    return np.clip((w * density * outside).sum(axis=-1), 0.0, 1.0)


def _density_grid(x1, n1, x2, n2):
    """T's density on a grid of _GRID points spanning its mean ± _HDI_SD sd (within [−1, 1])."""
    mean, var = beta_difference(x1, n1, x2, n2)
    sd = np.sqrt(var)
    lo = np.maximum(mean - _HDI_SD * sd, -1.0)[..., None]
    hi = np.minimum(mean + _HDI_SD * sd, 1.0)[..., None]
    tau = lo + (hi - lo) * np.linspace(0.0, 1.0, _GRID)  # (..., grid)
    return tau, _density_at(x1, n1, x2, n2, tau)


def _density_at(x1, n1, x2, n2, tau):
    """f_T(τ) for τ of shape (..., k): f_T(τ) = ∫ f_N(e) f_W(e + s·τ) de.

    Integrated for each τ over the bulk of the integrand (the product of two near-Gaussian
    densities: centre and width from that approximation, clipped to where both densities live),
    so no τ leaves its peak between nodes.
    """
    (an, bn), (aw, bw), sign = _narrow_and_wide(x1, n1, x2, n2)
    mn, vn = _beta_moments(an, bn)
    mw, vw = _beta_moments(aw, bw)
    shift = sign[..., None] * tau  # e_W = e_N + shift
    precision = 1 / vn + 1 / vw
    centre = (mn[..., None] / vn[..., None] + (mw[..., None] - shift) / vw[..., None]) / precision[
        ..., None
    ]
    half = _WINDOW_SD / np.sqrt(precision)[..., None]
    left = np.maximum.reduce([centre - half, np.zeros_like(centre), -shift])
    right = np.minimum.reduce([centre + half, np.ones_like(centre), 1 - shift])
    right = np.maximum(right, left)
    e = left[..., None] + (right - left)[..., None] * (_GRID_NODES + 1) / 2  # (..., k, nodes)
    w = (right - left)[..., None] / 2 * _GRID_WEIGHTS
    expand = (..., None, None)
    log_f = _log_pdf(e, an[expand], bn[expand], special.betaln(an, bn)[expand]) + _log_pdf(
        e + shift[..., None], aw[expand], bw[expand], special.betaln(aw, bw)[expand]
    )
    return (w * np.exp(log_f)).sum(axis=-1)


def _cdf_at(x1, n1, x2, n2, tau):
    """F_T(τ) = P(e2 − e1 <= τ) for τ of shape (...,): with T = s·(e_W − e_N),
    ∫ f_N(e) F_W(e + τ) de (s = 1) or ∫ f_N(e) (1 − F_W(e − τ)) de (s = −1), by Gauss-Legendre
    panels over N's bulk split where e ± τ leaves [0, 1]."""
    (an, bn), (aw, bw), sign = _narrow_and_wide(x1, n1, x2, n2)
    an, bn, aw, bw, sign, tau = np.broadcast_arrays(an, bn, aw, bw, sign, tau)
    lo, hi = _bulk(an, bn)
    shift = sign * tau
    cuts = np.sort(np.stack([np.clip(-shift, lo, hi), np.clip(1 - shift, lo, hi)], -1), -1)
    edges = np.concatenate([lo[..., None], cuts, hi[..., None]], axis=-1)
    left, right = edges[..., :-1, None], edges[..., 1:, None]
    e = (left + (right - left) * (_NODES + 1) / 2).reshape(*an.shape, -1)
    w = ((right - left) / 2 * _WEIGHTS).reshape(*an.shape, -1)
    density = np.exp(_log_pdf(e, an[..., None], bn[..., None]))
    moved = np.clip(e + shift[..., None], 0.0, 1.0)
    below = stats.beta.cdf(moved, aw[..., None], bw[..., None])  # P(e_W <= e + s·τ)
    inner = np.where(sign[..., None] > 0, below, 1 - below)
    return np.clip((w * density * inner).sum(axis=-1), 0.0, 1.0)


# Posteriors with both Beta parameters of both groups at least this large take the HDI's
# Edgeworth approximation (_large_sample_hdi); its ends are within 3e-7 of the quadrature's there
LARGE_POSTERIOR = 5000


def hdi_difference(x1, n1, x2, n2, mass=0.95) -> tuple[np.ndarray, np.ndarray]:
    """Narrowest interval holding ``mass`` of T = e2 − e1: the level set {f_T >= h}.

    T's density is log-concave (a convolution of log-concave Beta densities), hence unimodal, so
    the HDI is one interval with f_T(l) = f_T(u) and F_T(u) − F_T(l) = mass. A dense grid of the
    density brackets it (bisection on the level; ends interpolated linearly, error up to ~3e-4),
    then Newton's method on those two equations, with the CDF and density by quadrature, solves
    for the ends to better than 1e-6 (tests/test_detection.py: quadrature plus brentq). Where
    every Beta parameter is at least LARGE_POSTERIOR, the one-term Edgeworth expansion gives the
    ends in closed form instead (_large_sample_hdi; same test).
    """
    x1, n1, x2, n2 = np.broadcast_arrays(*(np.asarray(v, "float64") for v in (x1, n1, x2, n2)))
    a1, b1 = _params(x1, n1)
    a2, b2 = _params(x2, n2)
    large = np.minimum(np.minimum(a1, b1), np.minimum(a2, b2)) >= LARGE_POSTERIOR
    low, high = (np.array(v, dtype="float64") for v in _large_sample_hdi(a1, b1, a2, b2, mass))
    if (~large).any():
        rest = _in_chunks(partial(_hdi, mass=mass), x1[~large], n1[~large], x2[~large], n2[~large])
        low[~large], high[~large] = rest
    return low, high


def _large_sample_hdi(a1, b1, a2, b2, mass):
    """HDI of T = e2 − e1 from its mean μ, sd σ and skewness γ: μ + σ(±z + γ(z² − 3)/6).

    The Edgeworth density φ(x)(1 + γ(x³ − 3x)/6) has its level set [−z + ε, z + ε] with
    ε = γ(z² − 3)/6 to first order in γ (equal density at both ends; the mass condition keeps the
    width); γ = (κ₃(e2) − κ₃(e1))/σ³ with a Beta's third cumulant 2(b − a)√(a + b + 1)/
    ((a + b + 2)√(ab))·sd³. The error is O(1/n) in units of σ."""
    m1, v1 = _beta_moments(a1, b1)
    m2, v2 = _beta_moments(a2, b2)

    def third_cumulant(a, b, v):
        return 2 * (b - a) * np.sqrt(a + b + 1) / ((a + b + 2) * np.sqrt(a * b)) * v**1.5

    sd = np.sqrt(v1 + v2)
    gamma = (third_cumulant(a2, b2, v2) - third_cumulant(a1, b1, v1)) / sd**3
    z = stats.norm.ppf(0.5 + mass / 2)
    shift = gamma * (z * z - 3) / 6
    return m2 - m1 + sd * (-z + shift), m2 - m1 + sd * (z + shift)


def _hdi(x1, n1, x2, n2, mass):
    tau, density = _density_grid(x1, n1, x2, n2)
    step = tau[..., 1:2] - tau[..., 0:1]
    cdf = np.concatenate(
        [np.zeros_like(step), np.cumsum((density[..., 1:] + density[..., :-1]) / 2 * step, -1)], -1
    )
    total = cdf[..., -1:]
    cdf, density = cdf / total, density / total
    # Bracket the level: sort the grid densities, accumulate their mass, and take the two sorted
    # values around the point where it reaches ``mass``; then bisect within that bracket.
    ordered = -np.sort(-density, axis=-1)
    reached = np.argmax(np.cumsum(ordered, axis=-1) * step >= mass, axis=-1)
    index = np.arange(_GRID)

    def sorted_at(k):
        return np.take_along_axis(ordered, np.clip(k, 0, _GRID - 1)[..., None], -1)[..., 0]

    low, high = sorted_at(reached + 2), sorted_at(reached - 2)
    for _ in range(25):
        level = (low + high) / 2
        above = density >= level[..., None]
        first = np.where(above, index, _GRID).min(axis=-1)
        last = np.where(above, index, -1).max(axis=-1)
        left = _crossing(tau, density, cdf, level, first, -1)
        right = _crossing(tau, density, cdf, level, last, +1)
        enough = right[1] - left[1] >= mass
        low, high = np.where(enough, level, low), np.where(enough, high, level)
    return _refine_hdi(x1, n1, x2, n2, mass, left[0], right[0])


def _refine_hdi(x1, n1, x2, n2, mass, left, right, steps=_NEWTON_STEPS):
    """Newton's method on the HDI's two conditions, F(u) − F(l) = mass and f(u) = f(l), from the
    grid solution (f' by central differences); rows where it does not converge keep the grid's."""
    sd = np.sqrt(beta_difference(x1, n1, x2, n2)[1])
    h = 1e-5 * sd
    lo, hi = left.copy(), right.copy()
    for _ in range(steps):
        points = np.stack([lo - h, lo, lo + h, hi - h, hi, hi + h], axis=-1)
        f = _density_at(x1, n1, x2, n2, points)
        cdf = _cdf_at(
            x1[..., None], n1[..., None], x2[..., None], n2[..., None], points[..., [1, 4]]
        )
        r1, r2 = cdf[..., 1] - cdf[..., 0] - mass, f[..., 4] - f[..., 1]
        d_lo, d_hi = (f[..., 2] - f[..., 0]) / (2 * h), (f[..., 5] - f[..., 3]) / (2 * h)
        # Jacobian [[−f(l), f(u)], [−f'(l), f'(u)]]
        det = -f[..., 1] * d_hi + f[..., 4] * d_lo
        with np.errstate(divide="ignore", invalid="ignore"):
            step_lo = (d_hi * r1 - f[..., 4] * r2) / det
            step_hi = (d_lo * r1 - f[..., 1] * r2) / det
        ok = np.isfinite(step_lo) & np.isfinite(step_hi)
        lo, hi = np.where(ok, lo - step_lo, lo), np.where(ok, hi - step_hi, hi)
    points = np.stack([lo, hi], axis=-1)
    cdf = _cdf_at(x1[..., None], n1[..., None], x2[..., None], n2[..., None], points)
    f = _density_at(x1, n1, x2, n2, points)
    scale = np.maximum(f.max(axis=-1), 1e-300)
    good = (
        np.isfinite(lo)
        & np.isfinite(hi)
        & (np.abs(cdf[..., 1] - cdf[..., 0] - mass) < 1e-9)
        & (np.abs(f[..., 1] - f[..., 0]) < 1e-6 * scale)
        & (np.abs(lo - left) < 0.01 * (right - left) + 1e-12)
        & (np.abs(hi - right) < 0.01 * (right - left) + 1e-12)
    )
    return np.where(good, lo, left), np.where(good, hi, right)


def _crossing(tau, density, cdf, level, i, direction):
    """(τ, F) where the density crosses ``level`` next to grid index i, toward ``direction``."""
    j = np.clip(i + direction, 0, _GRID - 1)
    i = np.clip(i, 0, _GRID - 1)

    def at(values, k):
        return np.take_along_axis(values, k[..., None], axis=-1)[..., 0]

    fi, fj = at(density, i), at(density, j)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(fi != fj, (fi - level) / (fi - fj), 0.0)
    share = np.clip(share, 0.0, 1.0)
    point = at(tau, i) + share * (at(tau, j) - at(tau, i))
    probability = at(cdf, i) + share * (at(cdf, j) - at(cdf, i))
    return point, probability


def simple_rule(mean, sd, t, z) -> np.ndarray:
    """The blog's simple algorithm: +1 bias toward group 2, −1 toward group 1, 0 none."""
    return np.where(mean - z * sd > t, 1, np.where(mean + z * sd < -t, -1, 0))


def rope_decision(low, high, t) -> np.ndarray:
    """Kruschke's HDI + ROPE decision with ROPE = [−t, t]: 'biased', 'fair' or 'undecided'."""
    outside = (low > t) | (high < -t)
    inside = (low >= -t) & (high <= t)
    return np.where(outside, "biased", np.where(inside, "fair", "undecided"))


def unfairness_test(x1, n1, x2, n2, u_tol=0.0) -> tuple[np.ndarray, np.ndarray]:
    """Test of |U| > U_tol for U = M_2 − M_1 of rates x/n: (z of the larger side, two-sided p).

    tasks.twosample.two_sample_test: the audit tutorial's statistic with the Agresti-Caffo
    adjustment, Berger-Boos exact at every size; size at most α at every n
    (tests/test_twosample.py, benchmarks/calibration.py).
    """
    z, p, _ = two_sample_test(x2, n2, x1, n1, u_tol)
    return z, p


def detect(
    rates: pd.DataFrame,
    *,
    tolerance: float,
    alpha: float,
) -> pd.DataFrame:
    """Every rate metric of every comparison (group 2) against its reference (group 1).

    ``rates`` are the comparisons' rate counts (tasks.rates.comparison_rates), computed once per
    audit and shared with planning.

    One row per comparison and metric: the rate's counts (``numerator_*``, ``denominator_*``;
    PPR and PNR over every valid prediction), the observed ``difference``, the posterior mean and
    sd of T = e_group − e_reference, direction, P(|T| > tolerance), the (1 − alpha) HDI and its
    ROPE decision, the simple rule at z_{1−α/2}, the z and p of the test of |U| > tolerance
    (``test``: 'exact'), and the Benjamini-Hochberg adjusted p across all tested
    rows (``flagged`` when it is below alpha). Rows not tested (a zero denominator, a group below
    ``min_group_size``, the repeat of a two-valued attribute's comparison) carry ``reason``.
    """
    keys = ["attribute", "group_name", "reference", "metric"]
    x2, n2 = rates["numerator_group"].to_numpy(), rates["denominator_group"].to_numpy()
    x1, n1 = rates["numerator_reference"].to_numpy(), rates["denominator_reference"].to_numpy()
    reason = rates["reason"].to_numpy(dtype=object)
    ok = pd.isna(reason)
    defined = (n1 > 0) & (n2 > 0)  # the Bayesian summaries need both denominators
    x1, n1, x2, n2 = (np.where(defined, v, 1.0) for v in (x1, n1, x2, n2))  # placeholders
    mean, var = beta_difference(x1, n1, x2, n2)
    sd = np.sqrt(var)
    low, high = hdi_difference(x1, n1, x2, n2, 1 - alpha)
    z = np.full(len(rates), np.nan)
    p = np.full(len(rates), np.nan)
    exact = np.zeros(len(rates), dtype=bool)
    if ok.any():
        z[ok], p[ok], exact[ok] = two_sample_test(x2[ok], n2[ok], x1[ok], n1[ok], tolerance)
    z_crit = stats.norm.ppf(1 - alpha / 2)

    def shown(values):
        return np.where(defined, values, np.nan)

    adjusted = bh_adjust(p)
    with np.errstate(divide="ignore", invalid="ignore"):
        difference = shown(x2 / n2 - x1 / n1)
    return rates[keys].assign(
        numerator_group=shown(x2),
        denominator_group=shown(n2),
        numerator_reference=shown(x1),
        denominator_reference=shown(n1),
        difference=difference,
        mean=shown(mean),
        sd=shown(sd),
        direction=np.where(
            defined,
            np.where(difference > 0, "higher", np.where(difference < 0, "lower", "equal")),
            None,
        ),
        prob_deviation=shown(prob_deviation(x1, n1, x2, n2, tolerance)),
        hdi_low=shown(low),
        hdi_high=shown(high),
        decision=np.where(defined, rope_decision(low, high, tolerance), None),
        simple_rule=np.where(defined, simple_rule(mean, sd, tolerance, z_crit), 0),
        z=z,
        p_value=p,
        p_adjusted=adjusted,
        test=np.where(ok & exact, "exact", None),
        flagged=np.where(ok, adjusted < alpha, False),
        tolerance=tolerance,
        alpha=alpha,
        reason=reason,
    )
