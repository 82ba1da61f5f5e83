"""Two-sample test of |U| > U_tol for two rates, with size at most α at every sample size.

U = p_A − p_B for rates x_A/n_A and x_B/n_B ("A Brief Tutorial on Sample Size Calculations for
Fairness Audits", eqs. 1-3). The statistic is the audit tutorial's (Û − U_tol)/σ̂_U with the
Agresti-Caffo adjustment (one success and one failure added to each group before the estimate
and its variance):

    T = (m_A − m_B − U_tol)/s,   m = (x + 1)/(n + 2),   s² = Σ m(1 − m)/(n + 2).

H0: |U| <= U_tol against H1: |U| > U_tol is tested as two one-sided tests, "U > U_tol" (T with A,
B) and "U < −U_tol" (T with B, A), each at α/2: p = min(1, 2·min(p_up, p_down)). (α for
each side when U_tol > 0 would not be a level-α test: at U = U_tol the lower side still
rejects with probability up to α/2 ... α as U_tol/σ_U → 0, so the size can reach 2α.)

Each one-sided p-value is Berger and Boos's (1994, "P values maximized over a confidence set for
the nuisance parameter", JASA 89:1012-1016, section 2): with C_γ a (1 − γ) confidence set for
the parameter,

    p = sup over θ in C_γ ∩ H0 of P_θ(S >= s_obs) + γ,

valid for every γ in (0, 1): if θ is in C_γ, p <= α needs P_θ(S >= s_obs) <= α − γ, which happens
with probability at most α − γ, and θ is outside C_γ with probability at most γ. S is T made
monotone (S(x_A, x_B) = max of T over x_A' <= x_A, x_B' >= x_B; _boundary), so P_θ(S >= s) grows
with p_A and falls with p_B.

The nuisance. Under the shifted null H0: p_A − p_B <= U_tol the parameter is the pair (p_A, p_B);
on the boundary p_A = p_B + U_tol it is one number, p_B (the "common rate" only when U_tol = 0).
The pooled count x_A + x_B is binomial only when U_tol = 0 (the paper's example, a Clopper-Pearson
interval from it), so here C_γ is the rectangle of the two groups' own Clopper-Pearson intervals,
each with confidence √(1 − γ): independent, they cover (p_A, p_B) together with probability at
least 1 − γ. Over C_γ ∩ H0 the probability is largest on the boundary (raise p_A to p_B + U_tol,
or lower p_B to p_A − U_tol, while in the rectangle), so the supremum runs over the boundary's
segment p_B in [max(a_lo − U_tol, b_lo), min(a_hi − U_tol, b_hi)]. That segment is never empty
where T > 0 (a_hi > (x_A + 1)/(n_A + 1) > m_A and b_lo < x_B/(n_B + 1) < m_B, so
a_hi − b_lo > m_A − m_B > U_tol) unless the whole rectangle lies in H1 (a_lo − U_tol > b_hi);
there p = γ. Where either group is large the segment is a few of its standard errors wide, so the
supremum no longer ranges over rates the data rule out (the whole-range supremum made the test
ever more conservative as the two sizes diverged), and it takes few evaluations.

γ = GAMMA = 1e-9, fixed, so a p-value does not depend on the size of the audit's family: far
below the smallest level an audit uses (Benjamini-Hochberg's first rejection at α/m: 1e-9 is at
most 1e-3 of it up to m = 50,000 comparisons at α = 0.05), and it costs little (each interval
reaches ~6.2 standard errors instead of ~5.8 at γ = 1e-3·α/m for α/m = 1e-5). It floors the
two-sided p-value at 2γ.

The supremum is the largest probability over the nuisance values of _nuisance_grid inside the
segment (the grid values just outside each end included): uniform in asin√r of the larger
group's rate r, two standard errors of it apart (1/√n), at least _GRID over the boundary. Each
probability is a sum over the smaller group's counts of its binomial pmf times the other group's
binomial CDF at the region's edge. One test at every size: no switch to a normal test.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import special

from biasaudit.tasks import distributions
from biasaudit.tasks.arrays import distinct_rows, ragged

GAMMA = 1e-9  # Berger-Boos γ: the confidence set's error, added to every one-sided p-value
_GRID = 257  # nuisance values on the null boundary, at least
_TIE = 1e-9  # statistics within this (relative) of the observed one count as "as extreme"
_TABLE_RATIO = 40  # _Probabilities: a tail table's column costs 1/this of a binomial CDF (measured)
_SPREAD = 5.0  # _Probabilities: the larger group's counts within this many √n of its mean
_NEGLIGIBLE = 1e-18  # _window: the smaller group's mass left out, at most (Hoeffding)
_WALK = 8  # _boundary: steps from the quadratic's root before it bisects instead
_ROUNDING = 1e-6  # _boundary: a root within this of a count is checked against T itself
_BRACKET = 0.05  # exact_power: a cold search's first step (doubled until it brackets c)
_STRIDE = 4  # _critical_statistics: a size pair's nuisance values searched cold, one in this many
_STEPS = 400  # exact_power: their search's steps, at most
_CELLS = 2**21  # _critical_statistics: rows searched together hold about this many cells
_FEW = 64  # _searched_critical: tables between a bracket's ends it sorts to place c among them
_ZONED = 16  # _Zoned: edges found in the middle run only where the larger group is this much larger
_SATURATED = 1e-6  # _corner_bounds: a power this close to 1 is its bound, low by at most this
_OUTSIDE = 1e-13  # exact_powers: mass of each group's counts left out in each tail, by default
_RATE_DIGITS = 12  # exact_powers: true rates equal to this many decimals are computed once


def statistic(x_a, n_a, x_b, n_b, u_tol=0.0) -> np.ndarray:
    """T = (m_A − m_B − U_tol)/s with Agresti-Caffo adjusted rates and variance (module doc)."""
    x_a, n_a, x_b, n_b = (np.asarray(v, dtype="float64") for v in (x_a, n_a, x_b, n_b))
    m_a, m_b = (x_a + 1) / (n_a + 2), (x_b + 1) / (n_b + 2)
    s = np.sqrt(m_a * (1 - m_a) / (n_a + 2) + m_b * (1 - m_b) / (n_b + 2))
    return (m_a - m_b - u_tol) / s


def clopper_pearson(x, n, gamma: float = GAMMA) -> tuple[np.ndarray, np.ndarray]:
    """Clopper-Pearson interval of each rate x/n with confidence √(1 − γ) (module doc)."""
    return _interval_end(x, n, gamma, upper=False), _interval_end(x, n, gamma, upper=True)


def _end_tail(gamma: float) -> float:
    """The probability each end of clopper_pearson leaves beyond it: (1 − √(1 − γ))/2."""
    return float(-np.expm1(0.5 * np.log1p(-gamma)) / 2)


def _interval_end(x, n, gamma: float, *, upper: bool) -> np.ndarray:
    """One end of clopper_pearson (a beta quantile per rate: where only one end is needed)."""
    return exact_interval_end(x, n, _end_tail(gamma), upper=upper)


def exact_interval_end(x, n, tail: float, *, upper: bool) -> np.ndarray:
    """One end of the exact binomial interval (Clopper & Pearson 1934) of each rate x/n, leaving
    ``tail`` beyond it: a beta quantile, 0 (lower) at x = 0 and 1 (upper) at x = n."""
    x, n = np.broadcast_arrays(np.asarray(x, dtype="float64"), np.asarray(n, dtype="float64"))
    if upper:
        return np.where(x < n, distributions.beta_isf(tail, x + 1, np.maximum(n - x, 1)), 1.0)
    return np.where(x > 0, distributions.beta_ppf(tail, np.maximum(x, 1), n - x + 1), 0.0)


def _segment(x_a, n_a, x_b, n_b, u_tol, gamma) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The boundary's nuisance values p_B in C_γ: (low, high, empty), empty where the whole
    rectangle of the two intervals lies in H1 (module doc)."""
    a_low, a_high = clopper_pearson(x_a, n_a, gamma)
    b_low, b_high = clopper_pearson(x_b, n_b, gamma)
    low, high = np.maximum(a_low - u_tol, b_low), np.minimum(a_high - u_tol, b_high)
    return low, high, a_low - u_tol > b_high


@functools.lru_cache(maxsize=256)
def _nuisance_grid(n_a: int, n_b: int, u_tol: float) -> np.ndarray:
    """p_B on the boundary p_A = p_B + U_tol, from 0 to 1 − U_tol: uniform in asin√r of the larger
    group's rate r (p_B, or p_A where A is larger), two standard errors 2/(2√n) apart, at least
    _GRID values."""
    a_larger = n_a > n_b
    low, high = (u_tol, 1.0) if a_larger else (0.0, 1.0 - u_tol)
    phi = np.arcsin(np.sqrt([low, high]))
    count = max(_GRID, int(np.ceil((phi[1] - phi[0]) * np.sqrt(max(n_a, n_b)))) + 1)
    rate = np.sin(np.linspace(phi[0], phi[1], count)) ** 2
    grid = np.clip(rate - u_tol if a_larger else rate, 0.0, 1.0 - u_tol)
    grid[0], grid[-1] = 0.0, 1.0 - u_tol
    return grid


def _snap(grid: np.ndarray, low, high) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the grid values from the last at or below ``low`` to the first at or above
    ``high`` (so the values evaluated span the whole segment)."""
    first = np.clip(np.searchsorted(grid, low, side="right") - 1, 0, len(grid) - 1)
    last = np.clip(np.searchsorted(grid, high, side="left"), 0, len(grid) - 1)
    return first, np.maximum(last, first)


def _windows(n, p_low, p_high) -> tuple[np.ndarray, np.ndarray]:
    """(first, how many) counts of Binomial(n, p), p in [p_low, p_high], outside which the mass
    is below _NEGLIGIBLE at every such p (Hoeffding: P(|X − np| >= k) <= 2·exp(−2k²/n))."""
    k = np.sqrt(np.asarray(n) * np.log(2 / _NEGLIGIBLE) / 2)
    first = np.maximum(0, np.floor(n * np.asarray(p_low) - k))
    return first, (np.minimum(n, np.ceil(n * np.asarray(p_high) + k)) - first + 1).astype("int64")


def _window(n: int, p_low: float, p_high: float) -> np.ndarray:
    """_windows of one group, as its counts."""
    first, count = _windows(n, p_low, p_high)
    return np.arange(int(first), int(first) + int(count), dtype="float64")


def _boundary(n_a, n_b, t, u_tol: float, xs: np.ndarray | None = None):
    """The region {T >= t}, t > 0, described along the smaller group's counts ``xs`` (default:
    all of them); ``t`` a number (edges: one row) or one per row (edges: a row each); the sizes
    numbers, or one per row (a column, ``xs`` a row each) with the same group the smaller in all.

    Returns (a_small, edge). If A is the smaller group: the region is {x_B <= edge[x_A]} (edge −1:
    none). Otherwise: the region is {x_A >= edge[x_B]} (edge n_A + 1: none). Where T > 0 the
    numerator D = m_A − m_B − U_tol is positive, and there T decreases in x_B and increases in
    x_A (∂T/∂m_B = −(s + D·∂s/∂m_B)/s² < 0 because D·|1 − 2m_B|/(2(n_B + 2)) < m_B(1 − m_B)/(n_B + 2)
    <= s² when 0 < D < 1 − m_B; likewise for x_A), so each section of the region is an interval
    and the region is monotone, as Barnard's construction needs. Each section's end solves T = t:
    with y the larger group's adjusted rate, c the smaller's shifted by ∓U_tol and v its variance
    term, (c − y)² = t²(v + y(1 − y)/(n + 2)) is a quadratic in y whose smaller (larger) root is
    T = t's own when c is in [0, 1]. Rounded to a count it is the edge, except where rounding
    could move it (within _ROUNDING of a count, c outside [0, 1], a near double root): there T
    itself decides, walking from the root (cells more than _WALK counts off, a tie at the
    tolerance or no real root: bisection at those cells instead).
    """
    a_small = bool(np.all(np.asarray(n_a) <= np.asarray(n_b)))  # callers keep it one way
    small, large = (n_a, n_b) if a_small else (n_b, n_a)
    if xs is None:
        xs = np.arange(small + 1, dtype="float64")
    t = np.asarray(t, dtype="float64")
    threshold = (t - _TIE * (1 + np.abs(t)))[..., None]
    shape = np.broadcast_shapes(threshold.shape, xs.shape)

    def inside(x_large, at):  # T >= t at the larger group's counts, at cells ``at`` (flat)
        index = np.unravel_index(at, shape)
        xs_, na, nb, limit = (np.broadcast_to(v, shape)[index] for v in (xs, n_a, n_b, threshold))
        if a_small:
            return statistic(xs_, na, x_large, nb, u_tol) >= limit
        return statistic(x_large, na, xs_, nb, u_tol) >= limit

    m = (xs + 1) / (small + 2)
    c, v = (m - u_tol if a_small else m + u_tol), m * (1 - m) / (small + 2)
    k = threshold**2 / (large + 2)
    b = 2 * c + k
    discriminant = b**2 - 4 * (1 + k) * (c**2 - threshold**2 * v)
    guide = (threshold > 0) & (discriminant >= 0)  # else a tie at the tolerance, U_tol near 1
    root = np.sqrt(np.where(guide, discriminant, 0.0))
    if a_small:  # largest x_B whose rate is at most the smaller root
        count = (b - root) / (2 * (1 + k)) * (large + 2) - 1
        edge = np.floor(count)
    else:  # smallest x_A whose rate is at least the larger root
        count = (b + root) / (2 * (1 + k)) * (large + 2) - 1
        edge = np.ceil(count)
    edge = np.broadcast_to(np.clip(edge, -1, large + 1), shape).reshape(-1).copy()
    top = np.broadcast_to(large, shape).reshape(-1)
    # The root is T = t's own (c in [0, 1] puts c between the roots), so only a count within
    # rounding of an integer, c outside [0, 1] or a near double root needs T to decide.
    check = (
        (np.abs(count - np.round(count)) < _ROUNDING * (1 + large / 1e7))
        | (c < 0)
        | (c > 1)
        | (discriminant < 1e-8 * b**2)
    )
    at = np.flatnonzero(np.broadcast_to(check & guide, shape))
    near = edge[at]
    step = 1 if a_small else -1  # the direction that takes in more of the larger group's counts
    for _ in range(_WALK):  # out to the last count inside, in from the first outside: T decides
        ahead = near + step
        grow = (ahead >= 0) & (ahead <= top[at]) & inside(np.clip(ahead, 0, top[at]), at)
        shrink = (near >= 0) & (near <= top[at]) & ~inside(np.clip(near, 0, top[at]), at)
        settled = ~(grow | shrink)
        edge[at[settled]] = near[settled]
        at, near = (
            at[~settled],
            (near + step * (grow.astype("int64") - shrink.astype("int64")))[~settled],
        )
        if not len(at):
            break
    lost = np.union1d(at, np.flatnonzero(~np.broadcast_to(guide, shape)))  # the root no guide
    if len(lost):
        edge[lost] = _bisected_edges(a_small, top[lost], lambda x: inside(x, lost))
    return a_small, _monotone(a_small, edge.reshape(shape).astype("int64"))


def _bisected_edges(a_small: bool, large: np.ndarray, inside) -> np.ndarray:
    """_boundary's edges at some cells (``large``: the larger group's size at each) by bisection
    over the larger group's counts (log2 of them evaluations of T), where the quadratic's root
    is no guide."""
    # a_small: largest x_B inside (prefix); else: smallest x_A inside (suffix)
    large = np.asarray(large, dtype="float64")
    lo = np.full(large.shape, -1.0 if a_small else 0.0)
    hi = large.copy() if a_small else large + 1.0
    while True:
        open_ = hi - lo > 1
        if not open_.any():
            break
        mid = np.floor((lo + hi) / 2)
        good = inside(np.minimum(mid, large))
        if a_small:  # lo: last known inside (or −1); hi: first known outside, unless = large
            lo, hi = np.where(open_ & good, mid, lo), np.where(open_ & ~good, mid, hi)
        else:
            hi, lo = np.where(open_ & good, mid, hi), np.where(open_ & ~good, mid, lo)
    if a_small:
        return np.where(inside(large), large, lo)
    return np.where(inside(np.zeros(large.shape)), 0, hi)


def _monotone(a_small: bool, edge: np.ndarray) -> np.ndarray:
    """The region's monotone hull along the smaller group (Barnard's construction)."""
    if a_small:
        return np.maximum.accumulate(edge, axis=-1)
    return np.minimum.accumulate(edge[..., ::-1], axis=-1)[..., ::-1]


def _log_pmf(k: np.ndarray, n, p: np.ndarray) -> np.ndarray:
    """log Binomial(n, p) pmf at counts k (one row, or one per p) for probabilities p (column);
    n a number or one per row. Each row's counts are consecutive (after its last distinct count,
    a row may repeat it: padding), so log C(n, k) comes from _log_choose_rows."""
    n_rows = np.broadcast_to(np.asarray(n, dtype="float64").reshape(-1), (k.shape[0],))
    width = np.argmax(k == k[:, -1:], axis=1) + 1
    log_choose = _log_choose_rows(k[:, 0], width, n_rows, k.shape[1])
    p = np.asarray(p, dtype="float64")
    with np.errstate(divide="ignore", invalid="ignore"):
        successes, failures = k * np.log(p), (n_rows[:, None] - k) * np.log1p(-p)
    if (p <= 0).any() or (p >= 1).any():  # 0·log 0 = 0 (special.xlogy's convention)
        successes, failures = np.nan_to_num(successes, nan=0.0), np.nan_to_num(failures, nan=0.0)
    return log_choose + successes + failures


def _log_choose_rows(first: np.ndarray, width: np.ndarray, n: np.ndarray, columns: int):
    """log C(n_r, first_r + j) for j < columns in each row r (j >= width_r: its last count): the
    log-gamma at the row's first count, then the running sum of log((n − k)/(k + 1)) =
    log C(n, k + 1) − log C(n, k) along it. Two logarithms per count instead of three log-gamma
    values, and the running sums stay small beside log C itself: against 40-digit arithmetic
    the log pmf is within 2.2e-10 at n = 400,000 (log-gamma differences: 1.1e-9), 6e-12 at
    5,000 and 9e-13 at 900."""
    k = first[:, None] + np.arange(columns - 1)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        steps = np.log(n[:, None] - k) - np.log1p(k)
    steps = np.where(np.arange(columns - 1)[None, :] < (width - 1)[:, None], steps, 0.0)
    start = special.gammaln(n + 1) - special.gammaln(first + 1) - special.gammaln(n - first + 1)
    out = np.empty((len(first), columns))
    out[:, 0] = 0.0
    np.cumsum(steps, axis=1, out=out[:, 1:])
    return out + start[:, None]


def _tails(a_small: bool, n_l, p_l: np.ndarray, first: np.ndarray, width):
    """The larger group's tail at rates ``p_l``: its CDF P(X <= k) when A is the smaller group,
    else its survival P(X >= k), by cumulative sums of its pmf: within 1e-12 of scipy's binomial
    CDF up to n ~ 1,000, 1e-9 at n ~ 10⁴ and 5e-9 at n ~ 10⁶, where the log-gamma of n carries
    the rounding. Row r holds the tail at counts first[r] − 1 .. first[r] + width[r], its first
    column and column width[r] + 1 the constant tail beyond the kept counts (_Probabilities);
    ``n_l`` and ``width`` a number or one per row (the rows padded to the widest)."""
    n_l, width = np.asarray(n_l), np.asarray(width)
    rows = np.arange(len(first))
    columns = np.arange(int(width.max()))[None, :]
    kept = columns < np.reshape(width, (-1, 1))
    counts = (first[:, None] + np.minimum(columns, np.reshape(width, (-1, 1)) - 1)).astype(
        "float64"
    )
    n_column = n_l if n_l.ndim == 0 else n_l[:, None]
    pmf = np.where(kept, np.exp(_log_pmf(counts, n_column, p_l[:, None])), 0.0)
    if a_small:  # CDF; 1 exactly where the kept counts reach n
        tails = np.cumsum(pmf, axis=1)
        tails[rows, width - 1] = np.where(first + width - 1 == n_l, 1.0, tails[rows, width - 1])
        beyond = (0.0, 1.0)
    else:  # survival; 1 exactly where the kept counts start at 0
        tails = np.cumsum(pmf[:, ::-1], axis=1)[:, ::-1]
        tails[first == 0, 0] = 1.0
        beyond = (1.0, 0.0)
    table = np.pad(np.minimum(tails, 1.0), ((0, 0), (1, 1)), constant_values=(beyond, beyond))
    table[rows, width + 1] = beyond[1]
    return table


def _binomial_tail(a_small: bool, n_l, edge: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The larger group's CDF P(X <= edge) (A smaller; edge −1: 0, n: 1) or survival
    P(X >= edge) = bdtrc(edge − 1) (B smaller; edge 0: 1, n + 1: 0) at rates ``p``."""
    cut, n_l = edge.astype("float64"), np.asarray(n_l).astype("int64")  # bdtr: integer n
    if a_small:
        inner = special.bdtr(np.clip(cut, 0, n_l), n_l, p)
        return np.where(cut < 0, 0.0, np.where(cut >= n_l, 1.0, inner))
    inner = special.bdtrc(np.clip(cut - 1, 0, n_l), n_l, p)
    return np.where(cut <= 0, 1.0, np.where(cut > n_l, 0.0, inner))


class _Probabilities:
    """P(region) at p_B = each of ``p_b`` (p_A = p_B + ``shift``) for regions given by their
    edges along the smaller group's counts ``xs`` (_boundary): the smaller group's pmf times the
    larger group's CDF (or survival) at each edge, summed.

    Per nuisance value only the larger group's counts within _SPREAD·√n of its mean matter
    (outside, Hoeffding bounds the mass by 2·exp(−2·_SPREAD²) < 1e-21: the tail there is 0 or
    1). Where few edges fall among them (a larger group of millions against a small one: each
    count of the small group moves the edge by several of the large one's standard errors), the
    binomial CDF at those edges, until they cost more than a table of the tails there (_tails),
    which then serves every region asked about (planning's search).

    Many comparisons at once: ``n_a``, ``n_b`` one per row (the same one smaller in every row),
    ``xs`` a row of counts per row (``kept``: the columns that hold counts, the rest padding),
    ``owner`` the comparison of each row; each comparison chooses between CDF and table by its
    own rows, as it would alone."""

    def __init__(
        self,
        n_a,
        n_b,
        xs: np.ndarray,
        p_b: np.ndarray,
        shift: float,
        kept: np.ndarray | None = None,
        owner: np.ndarray | None = None,
    ):
        self.a_small = bool(np.all(np.asarray(n_a) <= np.asarray(n_b)))
        p_b = np.asarray(p_b, dtype="float64")
        p_a = np.minimum(p_b + shift, 1.0)
        n_s, p_s = (n_a, p_a) if self.a_small else (n_b, p_b)
        self.n_l, self.p_l = (n_b, p_b) if self.a_small else (n_a, p_a)
        n_column = n_s if np.ndim(n_s) == 0 else np.asarray(n_s)[:, None]
        self.pmf = np.exp(_log_pmf(np.atleast_2d(xs), n_column, p_s[:, None]))
        if kept is not None:
            self.pmf = np.where(kept, self.pmf, 0.0)
        self.kept = kept
        spread = 2 * np.ceil(_SPREAD * np.sqrt(self.n_l)).astype("int64") + 1
        width = np.minimum(np.asarray(self.n_l) + 1, spread).astype("int64")
        self.width = np.broadcast_to(width, self.p_l.shape)
        middle = np.round(self.n_l * self.p_l).astype("int64") - self.width // 2
        self.first = np.clip(middle, 0, self.n_l + 1 - self.width).astype("int64")
        self.owner = np.zeros(len(self.p_l), "int64") if owner is None else owner
        owners = int(self.owner.max()) + 1 if len(self.owner) else 0
        self.cost = np.bincount(self.owner, self.width, minlength=owners)  # its table's
        self.spent = np.zeros(owners, "int64")  # CDFs so far, per comparison
        self.tabled = np.zeros(owners, bool)
        self.table: np.ndarray | None = None

    def __call__(
        self,
        edge: np.ndarray,
        pmf: np.ndarray | None = None,
        kept: np.ndarray | None = None,
        table: bool | None = None,
        rows: np.ndarray | None = None,
    ) -> np.ndarray:
        """P(region) per row (of ``rows``, indices: all by default; ``edge`` one row each);
        ``pmf`` and ``kept``: the smaller group's pmf and kept columns at other counts than ``xs``
        (a part of each row: _Zoned), else this layout's own; ``table``: force the table (True)
        or the CDF (False); None: the cheaper."""
        rows = np.arange(len(self.p_l)) if rows is None else rows
        if pmf is None:
            pmf, kept = self.pmf[rows], None if self.kept is None else self.kept[rows]
        edge = np.broadcast_to(edge, pmf.shape)
        first, width, owner = self.first[rows], self.width[rows], self.owner[rows]
        column = edge - first[:, None] + 1  # the table's columns 1 .. width: kept counts
        inside = (column >= 1) & (column <= width[:, None])
        if kept is not None:
            inside &= kept
        if table is True:
            self.tabled[:] = True
        else:  # the table once a comparison's CDFs have cost more than it would
            fresh = ~self.tabled
            found = np.bincount(owner, inside.sum(axis=1), len(fresh)).astype("int64")
            self.spent += np.where(fresh, found, 0)
            if table is None:
                self.tabled |= fresh & (self.spent * _TABLE_RATIO > self.cost)
        use = self.tabled[owner]
        out = np.empty(len(rows))
        cdf = ~use
        if cdf.any():
            beyond = (0.0, 1.0) if self.a_small else (1.0, 0.0)
            tail = np.where(column[cdf] < 1, *beyond)
            cells = inside[cdf]
            rates = np.broadcast_to(self.p_l[rows[cdf], None], tail.shape)
            n_l = (
                self.n_l
                if np.ndim(self.n_l) == 0
                else np.broadcast_to(np.asarray(self.n_l)[rows[cdf], None], tail.shape)[cells]
            )
            tail[cells] = _binomial_tail(self.a_small, n_l, edge[cdf][cells], rates[cells])
            out[cdf] = (pmf[cdf] * tail).sum(axis=1)
        if use.any():
            tabled = rows[use]
            self._fill(tabled)
            assert self.table is not None
            at = np.clip(column[use], 0, width[use, None] + 1)
            out[use] = (pmf[use] * np.take_along_axis(self.table[tabled], at, axis=1)).sum(axis=1)
        return out

    def _fill(self, use: np.ndarray) -> None:
        """The tail table of the rows ``use`` (indices) that have none yet."""
        if self.table is None:
            self.table = np.empty((len(self.p_l), int(self.width.max()) + 2))
            self.filled = np.zeros(len(self.p_l), bool)
        rows = use[~self.filled[use]]
        if len(rows):
            n_l = self.n_l if np.ndim(self.n_l) == 0 else np.asarray(self.n_l)[rows]
            block = _tails(self.a_small, n_l, self.p_l[rows], self.first[rows], self.width[rows])
            self.table[rows, : block.shape[1]] = block
            self.filled[rows] = True


def exact_one_sided(
    x_a: int, n_a: int, x_b: int, n_b: int, u_tol: float = 0.0, gamma: float = GAMMA
) -> float:
    """Berger-Boos p-value of H0: p_A − p_B <= U_tol against p_A − p_B > U_tol (module doc).

    1 where T <= 0 (the estimate is not above the tolerance: a valid, conservative p-value; the
    test cannot reject there at any level below 1/2)."""
    table = [np.array([v], dtype="float64") for v in (x_a, n_a, x_b, n_b)]
    return float(_one_sided_pvalues(table[0], table[1], table[2], table[3], u_tol, gamma)[0])


def _one_sided_pvalues(x_a, n_a, x_b, n_b, u_tol: float, gamma: float) -> np.ndarray:
    """exact_one_sided of every table (arrays): γ where the rectangle lies in H1, else γ plus
    the supremum over the boundary's grid values spanning the segment, all tables at once."""
    t = statistic(x_a, n_a, x_b, n_b, u_tol)
    p = np.ones(len(t))
    positive = np.flatnonzero(t > 0)
    if not len(positive):
        return p
    x_a, n_a, x_b, n_b, t = (v[positive] for v in (x_a, n_a, x_b, n_b, t))
    low, high, empty = _segment(x_a, n_a, x_b, n_b, u_tol, gamma)
    p[positive[empty]] = gamma
    on = ~empty
    sup = _suprema(n_a[on], n_b[on], t[on], u_tol, low[on], high[on])
    p[positive[on]] = np.minimum(1.0, gamma + sup)
    return p


def _nuisance_values(n_a, n_b, u_tol: float, low, high) -> tuple[np.ndarray, np.ndarray]:
    """Each comparison's nuisance grid values spanning [low, high] (_snap), concatenated: (the
    values, how many per comparison); one grid per distinct pair of sizes."""
    grids = _Grids(n_a, n_b, u_tol)
    first, last = grids.snap(np.arange(len(n_a)), low, high)
    return grids.values[ragged(first, last - first + 1)], last - first + 1


class _Layout:
    """Comparisons (one group the smaller in all) and their nuisance values laid out as rows, one
    per (comparison, value): per row its sizes and the smaller group's counts that matter at all
    of its comparison's values (_window), padded to the widest."""

    def __init__(self, n_a, n_b, p_b: np.ndarray, count: np.ndarray, u_tol: float):
        self.owner = np.repeat(np.arange(len(n_a)), count)
        self.n_a, self.n_b = np.asarray(n_a)[self.owner], np.asarray(n_b)[self.owner]
        self.p_b = p_b
        ends = np.cumsum(count)
        low, high = p_b[ends - count], p_b[ends - 1]
        a_small = np.all(np.asarray(n_a) <= np.asarray(n_b))
        n_s = n_a if a_small else n_b
        if a_small:
            low, high = np.minimum(low + u_tol, 1.0), np.minimum(high + u_tol, 1.0)
        start, self.width = _windows(n_s, low, high)
        self.start = start
        columns = np.arange(int(self.width.max()))[None, :]
        self.kept = columns < self.width[self.owner, None]
        self.xs = start[self.owner, None] + np.minimum(columns, self.width[self.owner, None] - 1)
        self.probability = _Probabilities(
            self.n_a, self.n_b, self.xs, p_b, u_tol, self.kept, self.owner
        )
        self.u_tol = u_tol

    def edges(self, t: np.ndarray) -> np.ndarray:
        """_boundary's edges of {T >= t} in every row, ``t`` one per row."""
        return _boundary(self.n_a[:, None], self.n_b[:, None], t, self.u_tol, self.xs)[1]


def _batches(n_a, n_b, low, high, u_tol: float) -> list[np.ndarray]:
    """The comparisons split so each _Layout holds one group the smaller and rows of like
    widths (within a factor 2 of the smaller group's window and of the larger one's table)."""
    if not len(n_a):
        return []
    a_small = n_a <= n_b
    n_s, n_l = np.where(a_small, n_a, n_b), np.where(a_small, n_b, n_a)
    span = np.where(
        a_small, np.minimum(high + u_tol, 1.0) - np.minimum(low + u_tol, 1.0), high - low
    )
    span = np.maximum(span, 0.0)
    window = n_s * span + np.sqrt(n_s * np.log(2 / _NEGLIGIBLE) * 2) + 2
    key = np.stack([a_small, np.ceil(np.log2(window)), np.ceil(np.log2(np.sqrt(n_l) + 1))], axis=1)
    inverse = distinct_rows(key)[1]
    order = np.argsort(inverse, kind="stable")
    return np.split(order, np.cumsum(np.bincount(inverse))[:-1])


def _suprema(n_a, n_b, t, u_tol: float, low, high) -> np.ndarray:
    """_supremum of each comparison (arrays), in batches of like sizes."""
    out = np.empty(len(n_a))
    for rows in _batches(n_a, n_b, low, high, u_tol):
        p_b, count = _nuisance_values(n_a[rows], n_b[rows], u_tol, low[rows], high[rows])
        layout = _Layout(n_a[rows], n_b[rows], p_b, count, u_tol)
        probability = layout.probability(layout.edges(t[rows][layout.owner]))
        out[rows] = np.maximum.reduceat(probability, np.cumsum(count) - count)
    return out


def two_sample_test(
    x_a, n_a, x_b, n_b, u_tol: float = 0.0, gamma: float = GAMMA
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Test of |p_A − p_B| > U_tol for each element: (z of the larger side, p-value, tested).

    p = min(1, 2·min(p_up, p_down)), each side Berger-Boos exact (exact_one_sided); at most one
    side has T > 0 (U_tol >= 0), the other's p is 1. Rows with a zero count are the caller's to
    mask (their p here is 1, ``tested`` False). Each distinct table is computed once.
    """
    x_a, n_a, x_b, n_b = np.broadcast_arrays(
        *(np.asarray(v, dtype="float64") for v in (x_a, n_a, x_b, n_b))
    )
    z_up, z_down = statistic(x_a, n_a, x_b, n_b, u_tol), statistic(x_b, n_b, x_a, n_a, u_tol)
    tested = (n_a > 0) & (n_b > 0)
    p = np.ones(np.shape(x_a))
    at = np.flatnonzero(np.ravel(tested & (np.maximum(z_up, z_down) > 0)))
    if not len(at):
        return np.maximum(z_up, z_down), p, tested
    up = np.ravel(z_up)[at] > 0
    sides = [
        np.where(up, *(np.ravel(v)[at] for v in pair))
        for pair in ((x_a, x_b), (n_a, n_b), (x_b, x_a), (n_b, n_a))
    ]
    tables, inverse = distinct_rows(np.stack(sides, axis=1))
    one_sided = _one_sided_pvalues(
        tables[:, 0], tables[:, 1], tables[:, 2], tables[:, 3], u_tol, gamma
    )
    p.flat[at] = np.minimum(1.0, 2 * one_sided[inverse])
    return np.maximum(z_up, z_down), p, tested


def rejection_region(
    n_a: int, n_b: int, u_tol: float, alpha: float, gamma: float = GAMMA
) -> np.ndarray:
    """Boolean (n_A + 1, n_B + 1) table: where the two-sided test rejects at ``alpha``, from the
    p-value of every table (small groups: enumeration proofs)."""
    x_a, x_b = np.meshgrid(np.arange(n_a + 1), np.arange(n_b + 1), indexing="ij")
    return two_sample_test(x_a, n_a, x_b, n_b, u_tol, gamma)[1] <= alpha


def rejection_probability(region: np.ndarray, p_a, p_b) -> np.ndarray:
    """P(reject) = Σ pmf_A pmf_B over the region, for each pair of true rates (enumeration)."""
    n_a, n_b = region.shape[0] - 1, region.shape[1] - 1
    p_a, p_b = np.atleast_1d(np.asarray(p_a, float)), np.atleast_1d(np.asarray(p_b, float))
    pmf_a = distributions.binom_pmf(np.arange(n_a + 1)[None, :], n_a, p_a[:, None])
    pmf_b = distributions.binom_pmf(np.arange(n_b + 1)[None, :], n_b, p_b[:, None])
    return np.einsum("ki,ij,kj->k", pmf_a, region.astype("float64"), pmf_b)


def normal_power(p_a, n_a, p_b, n_b, u_tol: float, level: float) -> np.ndarray:
    """Power of the asymptotic two-sided test at true rates (p_A, p_B), same variance as T:
    Φ((U − U_tol)/s − z) + Φ((−U − U_tol)/s − z), z = z_{1−level/2}, s² = Σ p(1 − p)/(n + 2)."""
    p_a, n_a, p_b, n_b = (np.asarray(v, dtype="float64") for v in (p_a, n_a, p_b, n_b))
    s = np.sqrt(p_a * (1 - p_a) / (n_a + 2) + p_b * (1 - p_b) / (n_b + 2))
    z = distributions.norm_ppf(1 - level / 2)
    u = p_a - p_b
    with np.errstate(divide="ignore", invalid="ignore"):
        return distributions.norm_cdf((u - u_tol) / s - z) + distributions.norm_cdf(
            (-u - u_tol) / s - z
        )


def _range_max(values: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """max of values[first .. last] (inclusive) for each pair of indices (a sparse table)."""
    # maxima[j][i] is the max of values[i .. i + 2**j - 1]
    maxima = [values]
    while 2 ** len(maxima) <= len(values):
        half = 2 ** (len(maxima) - 1)
        maxima.append(np.maximum(maxima[-1][:-half], maxima[-1][half:]))
    span = np.floor(np.log2(last - first + 1)).astype("int64")  # two runs of 2**span cover it
    out = np.empty(len(first))
    for j in np.unique(span):
        at = span == j
        out[at] = np.maximum(maxima[j][first[at]], maxima[j][last[at] - 2**j + 1])
    return out


def _critical_statistics(
    n_a, n_b, p_b, u_tol: float, budget: float, precision: float = 1e-6
) -> np.ndarray:
    """For each row (sizes n_a, n_b and nuisance value p_b, arrays; a size pair's rows together,
    by rising p_b), the smallest t with P_p_B(S >= t) <= ``budget``, to ``precision`` (inf where
    no t > 0 has it).

    c moves little from one nuisance value to the next, so the search runs from scratch at every
    _STRIDE-th value of a size pair's rows and at its last (cold: from z_budget, steps of
    _BRACKET), then at the others from the line (in p_b) between the two searched on either
    side, with a first step of ``precision`` (warm: on the 642-group audit the line is within it
    of c for half of the rows, and 39% of them close in two evaluations). Where a row starts
    changes how soon its bracket closes and where in its last ``precision`` the row's c lands."""
    out = np.empty(len(p_b))
    if not len(p_b):
        return out
    index = np.arange(len(p_b))
    new = np.r_[True, (np.diff(n_a) != 0) | (np.diff(n_b) != 0)]
    starts, run = np.flatnonzero(new), np.cumsum(new) - 1
    first, last = starts[run], np.r_[starts[1:], len(p_b)][run] - 1
    offset = (index - first) % _STRIDE
    cold = (offset == 0) | (index == last)
    z = float(distributions.norm_isf(budget))

    def search(rows: np.ndarray, first_t: np.ndarray, bracket: np.ndarray) -> None:
        out[rows] = _searched_batches(
            n_a[rows], n_b[rows], p_b[rows], u_tol, budget, precision, first_t, bracket
        )

    rows = np.flatnonzero(cold)
    search(rows, np.full(len(rows), z), np.full(len(rows), _BRACKET))
    rows = np.flatnonzero(~cold)
    if len(rows):
        left = rows - offset[rows]
        right = np.minimum(left + _STRIDE, last[rows])
        c_left, c_right = out[left], out[right]
        known = np.isfinite(c_left) & np.isfinite(c_right)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = (p_b[rows] - p_b[left]) / (p_b[right] - p_b[left])
            line = c_left + np.nan_to_num(share) * (c_right - c_left)
        search(rows, np.where(known, line, z), np.where(known, precision, _BRACKET))
    return out


def _searched_batches(
    n_a, n_b, p_b, u_tol: float, budget: float, precision: float, start, bracket
) -> np.ndarray:
    """_searched_critical of rows in batches of like sizes (_batches) and bounded memory."""
    out = np.empty(len(p_b))
    n_s, n_l = np.minimum(n_a, n_b), np.maximum(n_a, n_b)
    # a row's arrays: its window of the smaller group's counts and the larger group's tail table
    cells = 2 * np.sqrt(n_s * np.log(2 / _NEGLIGIBLE) / 2) + 2 * _SPREAD * np.sqrt(n_l) + 4
    for batch in _batches(n_a, n_b, p_b, p_b, u_tol):
        cut = np.flatnonzero(np.diff(np.cumsum(cells[batch]) // _CELLS)) + 1
        for rows in np.split(batch, cut):  # bounded memory: about _CELLS cells at a time
            out[rows] = _searched_critical(
                n_a[rows],
                n_b[rows],
                p_b[rows],
                u_tol,
                budget,
                precision,
                start[rows],
                bracket[rows],
            )
    return out


def _searched_critical(
    n_a, n_b, p_b, u_tol: float, budget: float, precision: float, first_t, bracket
) -> np.ndarray:
    """_critical_statistics of rows with the same group the smaller, all rows' searches at once.
    Each row sums over the smaller group's counts that matter at its nuisance value
    (_row_probabilities).

    A bracket [low, high] with P(S >= low) > budget >= P(S >= high) (low = 0 at first: T > 0
    only; the first t tried: ``first_t``) narrows by Illinois steps on the gap
    Φ̄⁻¹(P(S >= t)) − Φ̄⁻¹(budget), nearly t − c, so a step lands close to c at once (an end kept
    twice has its gap halved; a point within ``precision`` of an end is moved that far inside;
    with one end only, the step goes 1.25 times the gap or ``bracket`` beyond that end,
    whichever is farther (a quarter of the gap beyond the c the gap points to), the bracket
    doubled after each such step, in cold and warm searches alike). Where
    the regions at the two ends differ by at most _FEW tables, c sits just above one of their
    statistics, the one _first_excluded finds from their probabilities: t = T* (plus the tie
    margin) is tried next, and where it holds, the row is done with c exact (small groups,
    whose statistics are far apart, end there in a few steps)."""
    a_small, xs, kept, probability = _row_probabilities(n_a, n_b, p_b, u_tol)
    z = float(distributions.norm_isf(budget))
    rows = len(p_b)
    low, high = np.zeros(rows), np.full(rows, np.inf)
    gap_low, gap_high = np.full(rows, np.nan), np.full(rows, np.nan)  # low = 0: not evaluated
    edge_low, edge_high = np.zeros(xs.shape, "int64"), np.zeros(xs.shape, "int64")
    moved = np.zeros(rows, bool)  # the last step moved low (else high)
    tail_high = np.zeros(rows)  # P(S >= high)
    pinned, pending = np.zeros(rows, bool), np.zeros(rows, bool)
    t = np.asarray(first_t, dtype="float64").copy()
    bracket = np.asarray(bracket, dtype="float64").copy()
    live = np.arange(rows)  # the rows whose search is open: only they are evaluated
    for _ in range(_STEPS):
        tail, edges = probability(t[live], live)
        gap = distributions.norm_isf(np.clip(tail, 1e-300, 1 - 1e-16)) - z  # ≈ t − c
        likely = tail > budget
        # Illinois: an end kept twice has its gap halved, so the secant moves it next
        g_low = np.where(~likely & ~moved[live], gap_low[live] / 2, gap_low[live])
        g_high = np.where(likely & moved[live], gap_high[live] / 2, gap_high[live])
        low[live], high[live] = (
            np.where(likely, t[live], low[live]),
            np.where(likely, high[live], t[live]),
        )
        gap_low[live], gap_high[live] = np.where(likely, gap, g_low), np.where(likely, g_high, gap)
        tail_high[live] = np.where(likely, tail_high[live], tail)
        edge_low[live] = np.where(likely[:, None], edges, edge_low[live])
        edge_high[live] = np.where(likely[:, None], edge_high[live], edges)
        pinned[live] |= pending[live] & ~likely
        moved[live] = likely
        bounded = np.isfinite(high[live])
        open_ = np.where(bounded, high[live] - low[live] > precision, low[live] < 1e6)
        open_ &= ~pinned[live]
        pending[live] = False
        live, bounded = live[open_], bounded[open_]
        if not len(live):
            break
        lo, hi, g_low, g_high = low[live], high[live], gap_low[live], gap_high[live]
        with np.errstate(invalid="ignore", divide="ignore"):
            secant = lo - g_low * (hi - lo) / (g_high - g_low)
        guess = np.where(
            bounded,
            np.where(np.isnan(g_low), hi - np.maximum(1.25 * g_high, bracket[live]), secant),
            lo + np.maximum(-1.25 * g_low, bracket[live]),  # beyond c, were the gap t − c
        )
        guess = np.where(np.isfinite(guess), guess, (lo + hi) / 2)
        inner = np.clip(guess, lo + precision / 2, hi - precision / 2)
        t[live] = np.where(bounded, inner, np.maximum(guess, lo + bracket[live]))
        # a step that did not close the bracket's missing end doubles the next one
        bracket[live] *= np.where(~bounded | np.isnan(g_low), 2.0, 1.0)
        differ = np.abs(edge_low[live] - edge_high[live]) * kept[live]
        between = differ.sum(axis=1)
        few = np.flatnonzero(bounded & ~np.isnan(g_low) & (between >= 1) & (between <= _FEW))
        if len(few):
            placed = live[few]
            above = _first_excluded(
                a_small,
                (n_a[placed], n_b[placed], xs[placed]),
                probability.probability,
                placed,
                differ[few],
                (edge_high if a_small else edge_low)[placed] + (1 if a_small else 0),
                budget - tail_high[placed],
                u_tol,
            )
            fits = (above > low[placed]) & (above < high[placed])
            t[placed[fits]], pending[placed[fits]] = above[fits], True
    high[high > 1e6] = np.inf
    return high


def _row_probabilities(n_a, n_b, p_b, u_tol: float) -> tuple[bool, np.ndarray, np.ndarray, _Zoned]:
    """For rows with the same group the smaller: whether it is A, each row's counts of the
    smaller group that matter at its nuisance value (_window, padded to the widest), which of
    them are kept (not padding), and P(S >= t) of the rows (_Zoned)."""
    a_small = bool(n_a[0] <= n_b[0])
    n_s = n_a if a_small else n_b
    p_s = np.minimum(p_b + u_tol, 1.0) if a_small else p_b
    start, width = _windows(n_s, p_s, p_s)
    columns = np.arange(int(width.max()))[None, :]
    kept = columns < width[:, None]
    xs = start[:, None] + np.minimum(columns, width[:, None] - 1)
    return a_small, xs, kept, _Zoned(n_a, n_b, xs, p_b, u_tol, width)


def _first_excluded(
    a_small: bool, cells, probability, rows, differ, first_between, room, u_tol: float
) -> np.ndarray:
    """Per row of ``rows``, the critical statistic its bracket's few tables between the two
    ends' regions point to: the tables (the smaller group's count x_s of column j, the larger
    group's counts first_between[j] .. first_between[j] + differ[j] − 1) sorted by T from the
    largest; each joins the region {S >= t} as t falls to its T (the region is monotone where
    T > 0, _boundary), adding its probability (``probability``'s pmf of x_s times the larger
    group's). The first table whose addition would take P(S >= t) beyond P(S >= high) + ``room``
    (the budget) stays out: c sits just above its T (inf where all fit, which the caller's range
    check refuses). The caller tries that t and keeps it only where P(S >= t) <= budget holds
    there. ``cells``: the rows' sizes (n_a, n_b) and counts xs."""
    n_a, n_b, xs = cells
    row, column = np.nonzero(differ)
    count = differ[row, column].astype("int64")
    which = np.repeat(np.arange(len(row)), count)
    offsets = ragged(np.zeros(len(row), "int64"), count)
    x_l = (first_between[row, column][which] + offsets).astype("float64")
    owner = row[which]
    x_s = xs[row, column][which].astype("float64")
    na, nb = n_a[owner], n_b[owner]
    table = statistic(x_s, na, x_l, nb, u_tol) if a_small else statistic(x_l, na, x_s, nb, u_tol)
    n_l = np.broadcast_to(probability.n_l, probability.p_l.shape)[rows][owner]
    mass = probability.pmf[rows[owner], column[which]] * distributions.binom_pmf(
        x_l, n_l, probability.p_l[rows][owner]
    )
    order = np.lexsort((-table, owner))  # by row, then from the largest T
    owner, table, mass = owner[order], table[order], mass[order]
    # running sums within each row, in extended precision: the batch's total does not round them
    added = np.cumsum(mass.astype(np.longdouble))
    first = np.searchsorted(owner, np.arange(len(room)))
    added -= np.r_[np.longdouble(0), added][first[owner]]
    over = added > room[owner]
    out = np.full(len(room), np.inf)
    index = np.flatnonzero(over)
    stop, at = np.unique(owner[index], return_index=True)
    out[stop] = table[index[at]] + 2 * _TIE * (1 + np.abs(table[index[at]]))
    return out


class _Zoned:
    """P(S >= t) of rows of like sizes (_searched_critical), the region's edge found only at the
    smaller group's counts where it falls among the larger group's counts _Probabilities keeps.

    The edge grows with the smaller group's count (the region is monotone where T > 0,
    _boundary), so along a row the counts split in three runs: edge below the kept counts (the
    larger group's tail there exactly 0, or 1 for B's survival), among them, and above (1, or 0).
    Two binary searches on T at the kept counts' ends find the runs; the edge is computed in the
    middle one only (a few of the row's counts when the larger group is far larger: each count of
    the smaller moves the edge by several of the larger's standard errors), the outer runs' mass
    is a difference of the row's cumulative pmf. The result is _Probabilities of _boundary's
    edges over the whole row. Rows of groups of like sizes (the larger less than _ZONED times the
    smaller) have most counts in the middle run: there the edges are found at every count."""

    def __init__(self, n_a, n_b, xs: np.ndarray, p_b, u_tol: float, width: np.ndarray):
        kept = np.arange(xs.shape[1])[None, :] < width[:, None]
        self.probability = _Probabilities(n_a, n_b, xs, p_b, u_tol, kept, np.arange(len(p_b)))
        self.a_small = self.probability.a_small
        self.n_a, self.n_b, self.xs, self.width, self.u_tol = n_a, n_b, xs, width, u_tol
        pmf = self.probability.pmf
        self.mass = np.concatenate([np.zeros((len(p_b), 1)), np.cumsum(pmf, axis=1)], axis=1)
        # the middle run holds ~1.1·√(n_s/n_l) of a row's counts: worth the searches where small
        n_s, n_l = (n_a, n_b) if self.a_small else (n_b, n_a)
        self.zoned = bool(np.max(n_s / n_l) <= 1 / _ZONED)

    def _first(
        self, rows: np.ndarray, inside, x_large: np.ndarray, threshold: np.ndarray, flip: bool
    ) -> np.ndarray:
        """Per row of ``rows`` the first column whose table (count, ``x_large``) is inside
        {T >= t} (or, ``flip``, not inside), the row's width where none is; columns are monotone
        in it."""
        width, n_a, n_b = self.width[rows], self.n_a[rows], self.n_b[rows]
        low, high = np.zeros(len(rows), "int64"), width.copy()
        while (open_ := low < high).any():
            mid = (low + high) // 2
            x_s = self.xs[rows, np.minimum(mid, width - 1)]
            if self.a_small:
                found = statistic(x_s, n_a, x_large, n_b, self.u_tol) >= threshold
            else:
                found = statistic(x_large, n_a, x_s, n_b, self.u_tol) >= threshold
            found = (found != flip) & inside
            high, low = np.where(open_ & found, mid, high), np.where(open_ & ~found, mid + 1, low)
        return low

    def __call__(self, t: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(P(S >= t), the edges over the whole row: those outside the middle run at the kept
        counts' ends, which give the same tails) for each row of ``rows`` (indices) at its t."""
        width = self.width[rows]
        sizes = (self.n_a[rows, None], self.n_b[rows, None])
        if not self.zoned:
            edges = _boundary(*sizes, t, self.u_tol, self.xs[rows])[1]
            return self.probability(edges, rows=rows), edges
        threshold = t - _TIE * (1 + np.abs(t))
        first, kept = self.probability.first[rows], self.probability.width[rows]
        n_l = (self.n_b if self.a_small else self.n_a)[rows]
        end = first + kept  # one past the larger group's kept counts
        if self.a_small:  # edge >= first: (x_s, first) inside; edge >= end: (x_s, end) inside
            begin = self._first(rows, np.ones(len(t), bool), first, threshold, flip=False)
            stop = self._first(rows, end <= n_l, end, threshold, flip=False)
        else:  # edge >= first: (first − 1, x_s) not inside; edge >= end: (end − 1, x_s) not
            begin = self._first(rows, first >= 1, first - 1, threshold, flip=True)
            begin = np.where(first >= 1, begin, 0)
            stop = self._first(rows, np.ones(len(t), bool), end - 1, threshold, flip=True)
        stop = np.maximum(stop, begin)
        span = stop - begin
        offsets = np.arange(max(int(span.max()), 1))[None, :]
        valid = offsets < span[:, None]
        columns = np.minimum(begin[:, None] + offsets, width[:, None] - 1)
        x_s = self.xs[rows[:, None], columns]
        middle = _boundary(*sizes, t, self.u_tol, x_s)[1]
        pmf = self.probability.pmf[rows[:, None], columns]
        total = self.probability(middle, np.where(valid, pmf, 0.0), valid, rows=rows)
        if self.a_small:  # above the middle run: the CDF is 1
            total += self.mass[rows, width] - self.mass[rows, stop]
        else:  # below it: the survival is 1
            total += self.mass[rows, begin]
        column = np.arange(self.xs.shape[1])[None, :]
        edges = np.where(column < begin[:, None], (first - 1)[:, None], end[:, None])
        edges = _scatter(edges, columns, middle, valid)
        return total, edges


def _scatter(base: np.ndarray, columns: np.ndarray, values: np.ndarray, valid: np.ndarray):
    """``base`` with values[r, k] at column columns[r, k] of row r where valid[r, k]."""
    rows = np.broadcast_to(np.arange(base.shape[0])[:, None], columns.shape)
    out = base.copy()
    out[rows[valid], columns[valid]] = values[valid]
    return out


class _Grids:
    """The nuisance grids (_nuisance_grid) of the distinct size pairs among many comparisons,
    concatenated: ``values`` and each value's sizes, ``pair`` each comparison's pair."""

    def __init__(self, n_a: np.ndarray, n_b: np.ndarray, u_tol: float):
        pairs, inverse = distinct_rows(np.stack([n_a, n_b], axis=1))
        grids = [_nuisance_grid(int(a), int(b), u_tol) for a, b in pairs]
        lengths = [len(grid) for grid in grids]
        self.start = np.cumsum([0] + lengths)
        self.values = np.concatenate(grids)
        self.n_a, self.n_b = np.repeat(pairs[:, 0], lengths), np.repeat(pairs[:, 1], lengths)
        self.pair = inverse

    def snap(self, which: np.ndarray, low, high) -> tuple[np.ndarray, np.ndarray]:
        """_snap of [low, high] on the grid of comparison ``which`` (each), as indices into
        ``values``."""
        first, last = np.empty(len(which), "int64"), np.empty(len(which), "int64")
        pair = self.pair[which]
        order = np.argsort(pair, kind="stable")
        for rows in np.split(order, np.flatnonzero(np.diff(pair[order])) + 1):
            begin, end = self.start[pair[rows[0]]], self.start[pair[rows[0]] + 1]
            first[rows], last[rows] = _snap(self.values[begin:end], low[rows], high[rows])
            first[rows] += begin
            last[rows] += begin
        return first, last


def _segment_hull(a_small: bool, edge: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """_monotone of each comparison's edges, the cells laid out by comparison (``owner``, non-
    decreasing) and within it by the smaller group's count: an offset per comparison larger than
    any edge's range keeps each running maximum (minimum, from the end) within its comparison."""
    span = float(edge.max() - edge.min() + 1) if len(edge) else 1.0
    shifted = edge + owner * span
    if a_small:
        return np.maximum.accumulate(shifted) - owner * span
    return np.minimum.accumulate(shifted[::-1])[::-1] - owner * span


def _oriented_powers(
    a_small: bool,
    n_a,
    n_b,
    p_a,
    p_b,
    u_tol: float,
    budget: float,
    gamma: float,
    precision: float,
    outside: float,
):
    """P(the one-sided test of p_A − p_B > U_tol has sup over C_γ ∩ H0 <= ``budget``) at true
    rates (p_A, p_B), for comparisons whose smaller group is A (``a_small``) or B in all.

    The test rejects a table x where S(x) >= c(θ) at every nuisance value θ it maximises over
    (c: _critical_statistics, computed once per size pair and grid value any comparison needs),
    or where its rectangle lies in H1. Per count of the smaller group, the tables at or beyond the
    region {T >= max c} (or in H1) all reject: their probability is a binomial tail; those
    between it and {T >= min c} are decided one by one. Counts beyond each group's binomial
    quantiles at ``outside`` and 1 − ``outside`` under the true rates are left out. All
    comparisons at once: cells (comparison, count of the smaller group) and tables (cell, count
    of the larger) in flat arrays, summed per comparison."""
    power = np.zeros(len(n_a))
    lo_a, hi_a = distributions.binom_ppf([[outside], [1 - outside]], n_a, p_a)
    lo_b, hi_b = distributions.binom_ppf([[outside], [1 - outside]], n_b, p_b)
    live = np.flatnonzero(statistic(hi_a, n_a, lo_b, n_b, u_tol) > 0)  # a table with T > 0
    bound, sure = _corner_bounds(n_a[live], n_b[live], p_a[live], p_b[live], u_tol, gamma)
    power[live[sure]] = bound[sure]
    live = live[~sure]
    if not len(live):
        return power
    n_a, n_b, p_a, p_b, lo_a, hi_a, lo_b, hi_b = (
        v[live] for v in (n_a, n_b, p_a, p_b, lo_a, hi_a, lo_b, hi_b)
    )
    a_low, b_high = (
        _interval_end(lo_a, n_a, gamma, upper=False),
        _interval_end(hi_b, n_b, gamma, upper=True),
    )
    a_high, b_low = (
        _interval_end(hi_a, n_a, gamma, upper=True),
        _interval_end(lo_b, n_b, gamma, upper=False),
    )
    grids = _Grids(n_a, n_b, u_tol)
    comparisons = np.arange(len(n_a))
    first, last = grids.snap(
        comparisons,
        np.maximum(a_low - u_tol, b_low),
        np.maximum(np.minimum(a_high - u_tol, b_high), 0.0),
    )
    marks = np.zeros(len(grids.values) + 1, "int64")
    np.add.at(marks, first, 1)
    np.add.at(marks, last + 1, -1)
    needed = np.cumsum(marks[:-1]) > 0
    rank = np.cumsum(needed) - 1  # a needed grid value's place in ``critical``
    at = np.flatnonzero(needed)
    critical = _critical_statistics(
        grids.n_a[at], grids.n_b[at], grids.values[at], u_tol, budget, precision
    )
    c_max = _range_max(critical, rank[first], rank[last])
    c_min = -_range_max(-critical, rank[first], rank[last])
    # cells: each comparison's counts of the smaller group
    lo_s, hi_s, n_s, p_s = (lo_a, hi_a, n_a, p_a) if a_small else (lo_b, hi_b, n_b, p_b)
    lo_l, hi_l, n_l, p_l = (lo_b, hi_b, n_b, p_b) if a_small else (lo_a, hi_a, n_a, p_a)
    owner = np.repeat(comparisons, (hi_s - lo_s + 1).astype("int64"))
    xs = ragged(lo_s, (hi_s - lo_s + 1).astype("int64")).astype("float64")
    pmf_s = distributions.binom_pmf(xs, n_s[owner], p_s[owner])
    # the H1 edge depends on the count and the sizes only: once per distinct (size pair, count)
    key = grids.pair[owner] * (float(n_s.max()) + 1) + xs
    _, once, inverse = np.unique(key, return_index=True, return_inverse=True)
    cell = owner[once]
    h1 = _h1_edges(a_small, xs[once], n_a[cell], n_b[cell], u_tol, gamma)[inverse.ravel()]
    toward = np.maximum if a_small else np.minimum  # the region taking in more tables

    def edges(t: np.ndarray) -> np.ndarray:  # {T >= t} per cell, hulled per comparison
        cells = np.flatnonzero(np.isfinite(t[owner]))
        edge = np.full(len(xs), np.nan)
        if not len(cells):
            return edge
        sizes = (n_a[owner[cells], None], n_b[owner[cells], None])
        raw = _boundary(*sizes, t[owner[cells]], u_tol, xs[cells, None])[1][:, 0]
        edge[cells] = _segment_hull(a_small, raw, owner[cells])
        return edge

    sure = edges(c_max)
    sure = np.where(np.isnan(sure), h1, toward(sure, h1))
    # the sure region's kept tables only: beyond the larger group's kept counts the nuisance
    # span (from the kept counts' intervals) does not hold their critical statistics
    n_cell, p_cell = n_l[owner], p_l[owner]
    if a_small:  # P(lo_l <= X <= min(sure, hi_l))
        tail = _binomial_tail(True, n_cell, np.minimum(sure, hi_l[owner]), p_cell)
        tail -= _binomial_tail(True, n_cell, lo_l[owner] - 1, p_cell)
    else:  # P(max(sure, lo_l) <= X <= hi_l)
        tail = _binomial_tail(False, n_cell, np.maximum(sure, lo_l[owner]), p_cell)
        tail -= _binomial_tail(False, n_cell, hi_l[owner] + 1, p_cell)
    tail = np.maximum(tail, 0.0)
    power[live] = np.bincount(owner, pmf_s * tail, minlength=len(n_a))
    maybe = edges(c_min)
    undecided = ~np.isnan(maybe)
    start, stop = (sure + 1, maybe + 1) if a_small else (maybe, sure)  # x_l in [start, stop)
    start, stop = np.maximum(start, lo_l[owner]), np.minimum(stop, hi_l[owner] + 1)
    count = np.where(undecided, np.maximum(stop - start, 0), 0).astype("int64")
    if not count.any():
        return power
    band = np.flatnonzero(count)
    power[live] += _undecided_power(
        a_small,
        (n_a, n_b, n_l, p_l),
        (owner[band], xs[band], pmf_s[band], start[band], stop[band]),
        (grids, first, last, critical, rank),
        u_tol,
        gamma,
    )
    return power


def _corner_bounds(n_a, n_b, p_a, p_b, u_tol: float, gamma: float):
    """(a lower bound on the power, where it is within _SATURATED of 1) of the one-sided test
    at true rates (p_A, p_B), from one corner of the tables and no critical statistic.

    k_A, k_B: the binomial quantiles at _SATURATED/2 from below (A) and above (B). Every table
    with x_A >= k_A and x_B <= k_B has its rectangle of intervals in H1 (p = γ, which rejects)
    where the corner (k_A, k_B) does, a_lo(k_A) − U_tol > b_hi(k_B), and T > 0 there (both
    ends move monotonely in the counts, and so does T's numerator, which sets its sign). The
    test then rejects with probability at least P(X_A >= k_A)·P(X_B <= k_B) (independent
    groups), within _SATURATED of 1: that bound is the power, low by at most _SATURATED. Large
    groups (tens of thousands) far from the tolerance end here."""
    k_a = distributions.binom_ppf(_SATURATED / 2, n_a, p_a)
    k_b = distributions.binom_ppf(1 - _SATURATED / 2, n_b, p_b)
    in_h1 = _interval_end(k_a, n_a, gamma, upper=False) - u_tol > _interval_end(
        k_b, n_b, gamma, upper=True
    )
    positive = statistic(k_a, n_a, k_b, n_b, u_tol) > 0
    bound = distributions.binom_sf(k_a - 1, n_a, p_a) * distributions.binom_cdf(k_b, n_b, p_b)
    return bound, in_h1 & positive & (bound >= 1 - _SATURATED)


def _undecided_power(a_small: bool, comparisons, cells, nuisance, u_tol: float, gamma: float):
    """Per comparison, the probability of its tables between the regions {T >= max c} and
    {T >= min c} that the test rejects: x_l in [start, stop) beside each cell's count x_s.

    A table rejects where T >= W, W the largest critical statistic over its segment's grid
    values [lo, hi] (_snap). Along x_l the smaller group's interval is fixed, so lo and hi move
    only where the larger group's interval passes a grid value g_j: by the intervals' duality
    with the binomial tails (as _h1_edges), its lower end reaches g_j (rate g_j + U_tol when the
    larger group is A) from x_l = Q_j on and its upper end passes it from x_l = R_j on, binomial
    quantiles. Between such points W is constant and T monotone in x_l, so the tables that
    reject are the part of the run inside {T >= W} (_boundary): one binomial CDF difference per
    run instead of one decision per table. Only grid values within the comparison's own span
    [first, last] move lo and hi (a table outside H1 has its segment inside that span)."""
    n_a, n_b, n_l, p_l = comparisons
    owner, xs, pmf_s, start, stop = cells
    grids, first, last, critical, rank = nuisance
    tail = _end_tail(gamma)
    # per comparison: the quantiles of its grid values, keyed apart by comparison
    used = np.unique(owner)
    span = (last[used] - first[used] + 1).astype("int64")
    whose = np.repeat(used, span)
    j = ragged(first[used], span)
    rate = np.clip(grids.values[j] + (0.0 if a_small else u_tol), 0.0, 1.0)
    n_large = n_l[whose]
    lower_from = n_large - distributions.binom_ppf(tail, n_large, 1 - rate) + 1  # Q_j
    upper_from = distributions.binom_ppf(tail, n_large, rate)  # R_j
    key = float(n_l.max()) + 4  # apart: comparison e's keys in [e·key, e·key + n + 1]
    inner = j > first[whose]  # Q_j for j in (first, last]; R_j for j in [first, last)
    q_keys = np.sort(np.where(inner, lower_from, np.inf) + whose * key)
    r_keys = np.sort(np.where(j < last[whose], upper_from, np.inf) + whose * key)

    def counted(keys: np.ndarray, e: np.ndarray, x: np.ndarray) -> np.ndarray:
        """#{keys of comparison e at or below x}."""
        return np.searchsorted(keys, x + e * key, "right") - np.searchsorted(keys, e * key - 1.5)

    # the smaller group's fixed end of each cell's segment, on its comparison's grid
    s_low, s_high = clopper_pearson(xs, (n_a if a_small else n_b)[owner], gamma)
    if a_small:
        s_low, s_high = s_low - u_tol, s_high - u_tol
    fixed_lo, fixed_hi = grids.snap(owner, s_low, s_high)
    # runs: each cell's start and every Q_j, R_j inside (start, stop)
    inside = []
    for keys in (q_keys, r_keys):
        begin = np.searchsorted(keys, start + owner * key, "right")
        end = np.searchsorted(keys, stop - 1 + owner * key, "right")
        at = ragged(begin, end - begin)
        cell = np.repeat(np.arange(len(xs)), end - begin)
        inside.append((cell, keys[at] - owner[cell] * key))
    run_cell = np.concatenate([np.arange(len(xs))] + [cell for cell, _ in inside])
    run_from = np.concatenate([start] + [at for _, at in inside])
    order = np.lexsort((run_from, run_cell))
    run_cell, run_from = run_cell[order], run_from[order]
    last_of_cell = np.r_[run_cell[1:] != run_cell[:-1], True]
    run_to = np.where(last_of_cell, stop[run_cell], np.r_[run_from[1:], 0.0])
    e = owner[run_cell]
    lo = np.maximum(fixed_lo[run_cell], first[e] + counted(q_keys, e, run_from))
    hi = np.maximum(np.minimum(fixed_hi[run_cell], first[e] + counted(r_keys, e, run_from)), lo)
    worst = _range_max(critical, rank[lo], rank[hi])
    finite = np.isfinite(worst)
    edge = np.full(len(run_cell), -1.0 if a_small else np.inf)
    if finite.any():
        sizes = (n_a[e[finite], None], n_b[e[finite], None])
        edge[finite] = _boundary(*sizes, worst[finite], u_tol, xs[run_cell[finite], None])[1][:, 0]
    if a_small:  # T falls along x_l: the run's tables up to the edge reject
        low, high = run_from, np.minimum(run_to - 1, edge)
    else:  # T rises along x_l: from the edge on
        low, high = np.maximum(run_from, edge), run_to - 1
    n_run, p_run = n_l[e].astype("int64"), p_l[e]
    mass = np.where(
        high >= low,
        special.bdtr(np.clip(high, 0, n_run), n_run, p_run)
        - np.where(low > 0, special.bdtr(np.clip(low - 1, 0, n_run), n_run, p_run), 0.0),
        0.0,
    )
    return np.bincount(e, pmf_s[run_cell] * mass, minlength=len(n_a))


def _h1_edges(a_small: bool, xs: np.ndarray, n_a, n_b, u_tol: float, gamma: float):
    """Per count of the smaller group, where the rectangle of the two intervals lies in H1
    (a_lo − U_tol > b_hi, p = γ): x_B <= the edge (A smaller) or x_A >= it. By the intervals'
    duality with the binomial tails (b_hi(x) < v exactly where P(X_B <= x; v) < the interval's
    tail, likewise a_lo(x) > v where P(X_A >= x; v) < it), one binomial quantile per count."""
    tail = _end_tail(gamma)
    if a_small:
        v = _interval_end(xs, n_a, gamma, upper=False) - u_tol
        edge = distributions.binom_ppf(tail, n_b, np.clip(v, 0.0, 1.0)) - 1
        return np.where(v > 0, edge, -1.0)
    v = _interval_end(xs, n_b, gamma, upper=True) + u_tol
    edge = n_a - distributions.binom_ppf(tail, n_a, np.clip(1 - v, 0.0, 1.0)) + 1
    return np.where(v < 1, edge, n_a + 1.0)


def exact_powers(
    n_a,
    n_b,
    p_a,
    p_b,
    u_tol: float,
    level: float,
    gamma: float = GAMMA,
    *,
    null_sides: bool = True,
    precision: float = 1e-6,
    outside: float = _OUTSIDE,
) -> np.ndarray:
    """P(the two-sided test rejects at ``level``) at true rates (p_A, p_B), each element: each
    side rejects where its sup over C_γ ∩ H0 is at most level/2 − γ (_oriented_powers).
    ``null_sides`` False leaves out a side whose null holds at the true rates: it rejects with
    probability at most level/2 (the test's size), which is all the power it would add.

    The side p_B − p_A > U_tol is the side p_A − p_B > U_tol of the mirrored counts n − x (T and
    the test are symmetric under it), so both sides, and every comparison with the same sizes,
    share one set of critical statistics; each distinct (sizes, rates rounded to 12 decimals)
    is computed once, at the rounded rates (a power moves by about n·1e-12 at most): a metric and
    its complement (TPR and FNR) at mirrored targets are one.

    ``precision``: the critical statistics' (t's) bracket width. A table whose T lies within it
    above a critical statistic is counted as not rejecting, so the power is low by at most the
    mass of those tables (1e-6: within 1e-12 of the enumeration of every table's p-value for
    small groups; planning's 1e-4 with ``outside`` 1e-7, against 1e-6 and 1e-13: COMPAS's
    powers (race, sex, race x sex) lower by at most 2.0e-7, those of an audit of 400,000 rows in
    642 groups by at most 8.7e-5). A side whose power is within
    _SATURATED (1e-6) of one is that bound, from the tables beyond one corner whose intervals
    lie in H1 (_corner_bounds), with no critical statistic: large groups far beyond the
    tolerance, low by at most 1e-6. ``outside``: each group's counts beyond its binomial
    quantiles at ``outside`` and 1 − ``outside`` (at the true rates) are counted as not
    rejecting, so the power is low by at most 4·outside more; fewer counts need fewer nuisance
    values (1e-7 instead of 1e-13: 15% fewer on the 642-group audit)."""
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype="float64") for v in (n_a, n_b, p_a, p_b)))
    n_a, n_b, p_a, p_b = (v.ravel() for v in arrays)
    budget = level / 2 - gamma
    power = np.zeros(len(n_a))
    if budget <= 0 or not len(n_a):
        return power.reshape(arrays[0].shape)
    up = np.flatnonzero(null_sides | (p_a - p_b > u_tol))
    down = np.flatnonzero(null_sides | (p_b - p_a > u_tol))
    sides = np.concatenate(
        [
            np.stack([n_a[up], n_b[up], p_a[up], p_b[up]], axis=1),
            np.stack([n_a[down], n_b[down], 1 - p_a[down], 1 - p_b[down]], axis=1),
        ]
    )
    # rates to _RATE_DIGITS decimals: a rate and its complement's mirror (1 − (1 − p)) are one
    distinct, inverse = distinct_rows(np.round(sides, _RATE_DIGITS))
    one_sided = np.zeros(len(distinct))
    for a_small in (True, False):
        rows = np.flatnonzero((distinct[:, 0] <= distinct[:, 1]) == a_small)
        if len(rows):
            size_a, size_b, rate_a, rate_b = distinct[rows].T
            one_sided[rows] = _oriented_powers(
                a_small, size_a, size_b, rate_a, rate_b, u_tol, budget, gamma, precision, outside
            )
    np.add.at(power, np.concatenate([up, down]), one_sided[inverse])
    return np.minimum(power, 1.0).reshape(arrays[0].shape)


def exact_power(
    n_a: int,
    n_b: int,
    p_a: float,
    p_b: float,
    u_tol: float,
    level: float,
    gamma: float = GAMMA,
    *,
    null_sides: bool = True,
) -> float:
    """exact_powers of one comparison."""
    return float(exact_powers(n_a, n_b, p_a, p_b, u_tol, level, gamma, null_sides=null_sides))
