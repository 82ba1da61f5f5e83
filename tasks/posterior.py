"""Posterior of a rate difference: T = e2 − e1 with e_i ~ Beta(x_i + 1, n_i − x_i + 1) independent
(x_i outcomes among n_i, uniform priors; "How to detect algorithmic bias in production").

Group first: the functions an audit calls (beta_difference, prob_deviation, and
tasks.hdi.hdi_difference) take the group's counts, then the reference's, as tasks.twosample does,
and T = e_group − e_reference. The tables inside keep the blog's order (x1, n1, x2, n2) =
(reference, group), so that T = e2 − e1.

Moments in closed form; T's density, its CDF and P(|T| > t) by fixed Gauss-Legendre quadrature,
vectorised over comparisons (in blocks of _CHUNK, to bound memory). Every integral runs over the
narrower posterior N's bulk (between its 1e-14 and 1 − 1e-14 quantiles: right for skewed posteriors
such as Beta(1, n), whose mass a Gaussian window of the same width in sd would cut), in panels split
where the integrand has kinks; the wider posterior W enters through its density or CDF, smooth on
that scale.

An audit's tables repeat: T of the mirrored table (x_i → n_i − x_i: a metric and its complement,
tpr/fnr, fpr/tnr, ppv/fdr, npv/for, ppr/pnr, acc/err) is −T, and so is T of the swapped one
(group 1 ↔ group 2); mirrored and swapped at once, it is T again. ``distinct_tables`` keeps one
table of each such class, so that each integral is computed once per class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy import special

from biasaudit.tasks import distributions
from biasaudit.tasks.arrays import distinct_rows

_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(40)
_TAIL = 1e-14
_CHUNK = 256  # comparisons per block: keeps the (block, points, nodes) arrays in cache-sized memory


def _params(x, n):
    x, n = np.asarray(x, dtype="float64"), np.asarray(n, dtype="float64")
    return x + 1, n - x + 1


def _beta_moments(a, b):
    mean = a / (a + b)
    return mean, a * b / ((a + b) ** 2 * (a + b + 1))


def beta_difference(x_group, n_group, x_reference, n_reference) -> tuple[np.ndarray, np.ndarray]:
    """Exact posterior mean and variance of T = e_group − e_reference under uniform priors.

    Mean (x_g+1)/(n_g+2) − (x_r+1)/(n_r+2), the blog's closed form (its group 2 is the group);
    variance the sum of the two Beta variances a·b/((a+b)²(a+b+1)), which the blog's long
    polynomial equals.
    """
    m_group, v_group = _beta_moments(*_params(x_group, n_group))
    m_reference, v_reference = _beta_moments(*_params(x_reference, n_reference))
    return m_group - m_reference, v_group + v_reference


def distinct_tables(x1, n1, x2, n2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One representative of each class of tables whose T is ±T of the others.

    Returns the representatives (4, k) as rows x1, n1, x2, n2; for each input table (flattened) the
    index of its representative; and the sign s with T(table) = s·T(representative). The
    representative is the lexicographically smallest of the table, its mirror (s = −1), its swap
    (s = −1) and its mirrored swap (s = +1).
    """
    x1, n1, x2, n2 = (np.asarray(v, dtype="float64").ravel() for v in (x1, n1, x2, n2))
    images = [
        (np.stack([x1, n1, x2, n2]), 1.0),
        (np.stack([n1 - x1, n1, n2 - x2, n2]), -1.0),
        (np.stack([x2, n2, x1, n1]), -1.0),
        (np.stack([n2 - x2, n2, n1 - x1, n1]), 1.0),
    ]
    best, sign = images[0][0], np.ones(x1.shape)
    for image, image_sign in images[1:]:
        smaller = _lexicographically_smaller(image, best)
        best = np.where(smaller, image, best)
        sign = np.where(smaller, image_sign, sign)
    tables, inverse = distinct_rows(best.T)
    return tables.T, inverse, sign


def _lexicographically_smaller(a, b):
    smaller = np.zeros(a.shape[1], dtype=bool)
    for i in reversed(range(a.shape[0])):
        smaller = (a[i] < b[i]) | ((a[i] == b[i]) & smaller)
    return smaller


class Pair(NamedTuple):
    """The two posteriors of a set of comparisons as quadrature sees them: Beta parameters of the
    narrower N and the wider W, the sign s with T = s·(e_W − e_N), each one's bulk (quantiles _TAIL
    and 1 − _TAIL) and log Beta normaliser."""

    an: np.ndarray
    bn: np.ndarray
    aw: np.ndarray
    bw: np.ndarray
    sign: np.ndarray
    n_lo: np.ndarray
    n_hi: np.ndarray
    w_lo: np.ndarray
    w_hi: np.ndarray
    n_log_norm: np.ndarray
    w_log_norm: np.ndarray

    def take(self, index) -> Pair:
        """The comparisons at ``index``."""
        return Pair(*(v[index] for v in self))


def posterior_pair(x1, n1, x2, n2) -> Pair:
    """The Pair of comparisons (x1, n1) vs (x2, n2), 1-D arrays of equal length."""
    a1, b1 = _params(x1, n1)
    a2, b2 = _params(x2, n2)
    first_narrow = _beta_moments(a1, b1)[1] <= _beta_moments(a2, b2)[1]
    an, bn = np.where(first_narrow, a1, a2), np.where(first_narrow, b1, b2)
    aw, bw = np.where(first_narrow, a2, a1), np.where(first_narrow, b2, b1)
    n_lo, n_hi = _bulk(an, bn)
    w_lo, w_hi = _bulk(aw, bw)
    return Pair(
        an,
        bn,
        aw,
        bw,
        np.where(first_narrow, 1.0, -1.0),
        n_lo,
        n_hi,
        w_lo,
        w_hi,
        special.betaln(an, bn),
        special.betaln(aw, bw),
    )


def _bulk(a, b):
    """Interval holding all but 2e-14 of Beta(a, b)'s mass (quantiles: right for skewed tails)."""
    return distributions.beta_ppf(_TAIL, a, b), distributions.beta_isf(_TAIL, a, b)


def _log_pdf(e, a, b, log_norm):
    """log Beta(a, b) density at e, with ``log_norm`` = betaln(a, b)."""
    e = np.clip(e, 1e-300, 1 - 1e-16)  # keeps 0·log(0) at 0 where a or b is 1
    return (a - 1) * np.log(e) + (b - 1) * np.log1p(-e) - log_norm


def _panel_nodes(lo, hi, cut1, cut2):
    """Gauss-Legendre nodes on the panels [lo, c1], [c1, c2], [c2, hi] (c1 <= c2 the cuts clipped
    to [lo, hi]) of each integral: (integral index, nodes, weights), one row per panel of
    positive width, so that cuts outside the bulk cost nothing."""
    cuts = np.sort(np.stack([np.clip(cut1, lo, hi), np.clip(cut2, lo, hi)], axis=-1), axis=-1)
    edges = np.concatenate([lo[:, None], cuts, hi[:, None]], axis=-1)
    width = np.diff(edges, axis=-1)
    integral, panel = np.nonzero(width > 0)
    half = width[integral, panel, None] / 2
    return integral, edges[integral, panel, None] + half * (_NODES + 1), half * _WEIGHTS


def density_at(pair: Pair, tau) -> np.ndarray:
    """f_T(τ) for τ of shape (m, k): ∫ f_N(e) f_W(e + s·τ) de over N's bulk, clipped to where
    e + s·τ is in W's bulk (the integrand's support), with 40 Gauss-Legendre nodes."""
    shift = pair.sign[:, None] * tau  # e_W = e_N + shift
    left = np.maximum(pair.n_lo[:, None], pair.w_lo[:, None] - shift)
    right = np.maximum(np.minimum(pair.n_hi[:, None], pair.w_hi[:, None] - shift), left)
    e = left[..., None] + (right - left)[..., None] * (_NODES + 1) / 2  # (m, k, nodes)
    w = (right - left)[..., None] / 2 * _WEIGHTS
    each = (slice(None), None, None)
    log_f = _log_pdf(e, pair.an[each], pair.bn[each], pair.n_log_norm[each]) + _log_pdf(
        e + shift[..., None], pair.aw[each], pair.bw[each], pair.w_log_norm[each]
    )
    return (w * np.exp(log_f)).sum(axis=-1)


def cdf_at(pair: Pair, tau) -> np.ndarray:
    """F_T(τ) = P(e2 − e1 <= τ) for τ of shape (m, k): with T = s·(e_W − e_N),
    ∫ f_N(e) F_W(e + τ) de (s = 1) or ∫ f_N(e) (1 − F_W(e − τ)) de (s = −1) over N's bulk, in
    panels split where e ± τ leaves [0, 1]."""
    m, k = tau.shape
    flat = pair.take(np.repeat(np.arange(m), k))
    shift = flat.sign * tau.ravel()
    integral, e, w = _panel_nodes(flat.n_lo, flat.n_hi, -shift, 1 - shift)
    at = flat.take(integral)
    density = np.exp(_log_pdf(e, at.an[:, None], at.bn[:, None], at.n_log_norm[:, None]))
    moved = np.clip(e + shift[integral, None], 0.0, 1.0)
    below = special.betainc(at.aw[:, None], at.bw[:, None], moved)  # P(e_W <= e + s·τ)
    inner = np.where(at.sign[:, None] > 0, below, 1 - below)
    total = np.bincount(integral, (w * density * inner).sum(axis=-1), minlength=m * k)
    return np.clip(total, 0.0, 1.0).reshape(m, k)


def in_chunks(function: Callable, *arrays):
    """Apply ``function`` to blocks of _CHUNK broadcast elements and stitch the results back."""
    broadcast = np.broadcast_arrays(*(np.asarray(a, "float64") for a in arrays))
    shape = broadcast[0].shape
    flat = [a.ravel() for a in broadcast]
    size = flat[0].size
    parts = [function(*(a[i : i + _CHUNK] for a in flat)) for i in range(0, max(size, 1), _CHUNK)]
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(p)[:size].reshape(shape) for p in zip(*parts))
    return np.concatenate(parts)[:size].reshape(shape)


def prob_deviation(x_group, n_group, x_reference, n_reference, t) -> np.ndarray:
    """P(|e_group − e_reference| > t) = ∫ f_N(e)[1 − F_W(e + t) + F_W(e − t)] de (the blog's
    algorithm 2): the sum of deviation_tails.

    The identity holds whichever of the two posteriors is the narrow one N, so the integral always
    runs over the narrower. Accurate to better than 1e-6 (checked against scipy.integrate.quad).
    """
    above, below = deviation_tails(x_group, n_group, x_reference, n_reference, t)
    return np.clip(above + below, 0.0, 1.0)


def deviation_tails(x_group, n_group, x_reference, n_reference, t) -> tuple[np.ndarray, np.ndarray]:
    """(P(T > t), P(T < −t)) for T = e_group − e_reference: ∫ f_N(e)(1 − F_W(e + t)) de and
    ∫ f_N(e) F_W(e − t) de are P(e_W − e_N > t) and P(e_W − e_N < −t), T = s·(e_W − e_N).

    Computed once per class of tables and t (distinct_tables): T of a table is s·T of its class's
    representative, and s = −1 swaps the two tails.
    """
    x1, n1, x2, n2, t = np.broadcast_arrays(
        *(np.asarray(v, "float64") for v in (x_reference, n_reference, x_group, n_group, t))
    )
    tables, inverse, sign = distinct_tables(x1, n1, x2, n2)
    keys, key_index = distinct_rows(np.vstack([tables[:, inverse], t.ravel()]).T)
    above, below = (values[key_index] for values in in_chunks(_deviation_tails, *keys.T))
    flipped = sign < 0
    return (
        np.where(flipped, below, above).reshape(t.shape),
        np.where(flipped, above, below).reshape(t.shape),
    )


def _deviation_tails(x1, n1, x2, n2, t):
    pair = posterior_pair(x1, n1, x2, n2)
    integral, e, w = _panel_nodes(pair.n_lo, pair.n_hi, t, 1 - t)
    at = pair.take(integral)
    density = w * np.exp(_log_pdf(e, at.an[:, None], at.bn[:, None], at.n_log_norm[:, None]))
    t = t[integral, None]
    aw, bw = at.aw[:, None], at.bw[:, None]
    high = special.betaincc(aw, bw, np.minimum(e + t, 1.0))  # P(e_W − e_N > t) at e_N = e
    low = special.betainc(aw, bw, np.maximum(e - t, 0.0))  # P(e_W − e_N < −t) at e_N = e
    up, down = (
        np.clip(np.bincount(integral, (density * v).sum(axis=-1), minlength=len(pair.an)), 0, 1)
        for v in (high, low)
    )
    return np.where(pair.sign > 0, up, down), np.where(pair.sign > 0, down, up)
