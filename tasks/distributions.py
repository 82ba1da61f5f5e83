"""The distribution functions the statistics evaluate, from the kernels scipy.stats itself calls.

scipy.stats computes the normal's functions with scipy.special's ndtr and ndtri, the beta's with
betainc and its inverses, and the binomial's and hypergeometric's with Boost's kernels in
scipy.special._ufuncs, then handles arguments outside the support. Importing scipy.stats is a
large share of every process's start (it loads scipy.spatial, sparse, linalg and optimize:
benchmarks/results/start_cost.md); these
functions call the same kernels with the same handling of the support, so every value is the same
to the last bit (tests/test_distributions.py compares them with scipy.stats over grids of
arguments, the support's edges included). Only for valid parameters (n a count, p in [0, 1], not
NaN): where scipy.stats returns NaN for invalid ones, these may return a number; the callers mask
such rows (a zero denominator, an undefined rate) themselves.
"""

from __future__ import annotations

import numpy as np
from scipy import special
from scipy.special import _ufuncs as kernels  # scipy.stats' own binomial and hypergeometric


def norm_cdf(x):
    return special.ndtr(x)


def norm_sf(x):
    return special.ndtr(-np.asarray(x, dtype="float64"))


def norm_ppf(q):
    return special.ndtri(q)


def norm_isf(q):
    return -special.ndtri(q)


def beta_cdf(x, a, b):
    return special.betainc(a, b, np.clip(x, 0.0, 1.0))


def beta_ppf(q, a, b):
    return special.betaincinv(a, b, q)


def beta_isf(q, a, b):
    return special.betainccinv(a, b, q)


def chi2_sf(x, df):
    return special.chdtrc(df, np.maximum(x, 0.0))


def _cdf(kernel, k, low, high, *parameters):
    """A discrete CDF at floor(k): 0 below the support [low, high], 1 from its top on."""
    k = np.floor(k)
    inner = (k >= low) & (k < high)
    value = kernel(np.where(inner, k, low), *parameters)
    return np.where(inner, value, np.where(k >= high, 1.0, 0.0))[()]


def _sf(kernel, k, low, high, *parameters):
    """A discrete survival function P(X > floor(k)): 1 below the support, 0 from its top on."""
    k = np.floor(k)
    inner = (k >= low) & (k < high)
    value = kernel(np.where(inner, k, low), *parameters)
    return np.where(inner, value, np.where(k < low, 1.0, 0.0))[()]


def _pmf(kernel, k, low, high, *parameters):
    """A discrete pmf: 0 at non-integers and outside the support."""
    k = np.asarray(k, dtype="float64")
    inner = (k >= low) & (k <= high) & (np.floor(k) == k)
    value = kernel(np.where(inner, k, low), *parameters)
    return np.where(inner, value, 0.0)[()]


def binom_pmf(k, n, p):
    return _pmf(kernels._binom_pmf, k, 0, n, n, p)


def binom_cdf(k, n, p):
    return _cdf(kernels._binom_cdf, k, 0, n, n, p)


def binom_sf(k, n, p):
    return _sf(kernels._binom_sf, k, 0, n, n, p)


def binom_ppf(q, n, p):
    """The smallest k with P(X <= k) >= q (−1 at q = 0, n at q = 1, NaN outside [0, 1])."""
    q = np.asarray(q, dtype="float64")
    inner = (q > 0) & (q < 1)
    value = kernels._binom_ppf(np.where(inner, q, 0.5), n, p)
    return np.where(inner, value, np.where(q == 0, -1.0, np.where(q == 1, n, np.nan)))[()]


def _hypergeom_support(total, successes, draws):
    return np.maximum(draws - (total - successes), 0), np.minimum(successes, draws)


def hypergeom_pmf(k, total, successes, draws):
    """P(X = k) for X the successes among ``draws`` of ``total`` items holding ``successes``."""
    low, high = _hypergeom_support(total, successes, draws)
    return _pmf(kernels._hypergeom_pmf, k, low, high, successes, draws, total)


def hypergeom_cdf(k, total, successes, draws):
    low, high = _hypergeom_support(total, successes, draws)
    return _cdf(kernels._hypergeom_cdf, k, low, high, successes, draws, total)


def hypergeom_sf(k, total, successes, draws):
    low, high = _hypergeom_support(total, successes, draws)
    return _sf(kernels._hypergeom_sf, k, low, high, successes, draws, total)
