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
monotone (S(x_A, x_B) = max of T over x_A' <= x_A, x_B' >= x_B; boundary), so P_θ(S >= s) grows
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

The supremum is the largest probability over the nuisance values of nuisance_grid inside the
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
TIE = 1e-9  # statistics within this (relative) of the observed one count as "as extreme"
_TABLE_RATIO = 40  # Probabilities: a tail table's column costs 1/this of a binomial CDF (measured)
SPREAD = 5.0  # Probabilities: the larger group's counts within this many √n of its mean
NEGLIGIBLE = 1e-18  # count_window: the smaller group's mass left out, at most (Hoeffding)
_WALK = 8  # boundary: steps from the quadratic's root before it bisects instead
_ROUNDING = 1e-6  # boundary: a root within this of a count is checked against T itself


def statistic(x_a, n_a, x_b, n_b, u_tol=0.0) -> np.ndarray:
    """T = (m_A − m_B − U_tol)/s with Agresti-Caffo adjusted rates and variance (module doc)."""
    x_a, n_a, x_b, n_b = (np.asarray(v, dtype="float64") for v in (x_a, n_a, x_b, n_b))
    m_a, m_b = (x_a + 1) / (n_a + 2), (x_b + 1) / (n_b + 2)
    s = np.sqrt(m_a * (1 - m_a) / (n_a + 2) + m_b * (1 - m_b) / (n_b + 2))
    return (m_a - m_b - u_tol) / s


def clopper_pearson(x, n, gamma: float = GAMMA) -> tuple[np.ndarray, np.ndarray]:
    """Clopper-Pearson interval of each rate x/n with confidence √(1 − γ) (module doc)."""
    return interval_end(x, n, gamma, upper=False), interval_end(x, n, gamma, upper=True)


def end_tail(gamma: float) -> float:
    """The probability each end of clopper_pearson leaves beyond it: (1 − √(1 − γ))/2."""
    return float(-np.expm1(0.5 * np.log1p(-gamma)) / 2)


def interval_end(x, n, gamma: float, *, upper: bool) -> np.ndarray:
    """One end of clopper_pearson (a beta quantile per rate: where only one end is needed)."""
    return exact_interval_end(x, n, end_tail(gamma), upper=upper)


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
def nuisance_grid(n_a: int, n_b: int, u_tol: float) -> np.ndarray:
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


def snap(grid: np.ndarray, low, high) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the grid values from the last at or below ``low`` to the first at or above
    ``high`` (so the values evaluated span the whole segment)."""
    first = np.clip(np.searchsorted(grid, low, side="right") - 1, 0, len(grid) - 1)
    last = np.clip(np.searchsorted(grid, high, side="left"), 0, len(grid) - 1)
    return first, np.maximum(last, first)


def count_windows(n, p_low, p_high) -> tuple[np.ndarray, np.ndarray]:
    """(first, how many) counts of Binomial(n, p), p in [p_low, p_high], outside which the mass
    is below NEGLIGIBLE at every such p (Hoeffding: P(|X − np| >= k) <= 2·exp(−2k²/n))."""
    k = np.sqrt(np.asarray(n) * np.log(2 / NEGLIGIBLE) / 2)
    first = np.maximum(0, np.floor(n * np.asarray(p_low) - k))
    return first, (np.minimum(n, np.ceil(n * np.asarray(p_high) + k)) - first + 1).astype("int64")


def count_window(n: int, p_low: float, p_high: float) -> np.ndarray:
    """count_windows of one group, as its counts."""
    first, count = count_windows(n, p_low, p_high)
    return np.arange(int(first), int(first) + int(count), dtype="float64")


def boundary(n_a, n_b, t, u_tol: float, xs: np.ndarray | None = None):
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
    threshold = (t - TIE * (1 + np.abs(t)))[..., None]
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
    return a_small, monotone(a_small, edge.reshape(shape).astype("int64"))


def _bisected_edges(a_small: bool, large: np.ndarray, inside) -> np.ndarray:
    """boundary's edges at some cells (``large``: the larger group's size at each) by bisection
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


def monotone(a_small: bool, edge: np.ndarray) -> np.ndarray:
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
    column and column width[r] + 1 the constant tail beyond the kept counts (Probabilities);
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


def binomial_tail(a_small: bool, n_l, edge: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The larger group's CDF P(X <= edge) (A smaller; edge −1: 0, n: 1) or survival
    P(X >= edge) = bdtrc(edge − 1) (B smaller; edge 0: 1, n + 1: 0) at rates ``p``."""
    cut, n_l = edge.astype("float64"), np.asarray(n_l).astype("int64")  # bdtr: integer n
    if a_small:
        inner = special.bdtr(np.clip(cut, 0, n_l), n_l, p)
        return np.where(cut < 0, 0.0, np.where(cut >= n_l, 1.0, inner))
    inner = special.bdtrc(np.clip(cut - 1, 0, n_l), n_l, p)
    return np.where(cut <= 0, 1.0, np.where(cut > n_l, 0.0, inner))


class Probabilities:
    """P(region) at p_B = each of ``p_b`` (p_A = p_B + ``shift``) for regions given by their
    edges along the smaller group's counts ``xs`` (boundary): the smaller group's pmf times the
    larger group's CDF (or survival) at each edge, summed.

    Per nuisance value only the larger group's counts within SPREAD·√n of its mean matter
    (outside, Hoeffding bounds the mass by 2·exp(−2·SPREAD²) < 1e-21: the tail there is 0 or
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
        spread = 2 * np.ceil(SPREAD * np.sqrt(self.n_l)).astype("int64") + 1
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
        (a part of each row: tasks.twosample_power._Zoned), else this layout's own; ``table``: force the table (True)
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
            tail[cells] = binomial_tail(self.a_small, n_l, edge[cdf][cells], rates[cells])
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


class NuisanceGrids:
    """The nuisance grids (nuisance_grid) of the distinct size pairs among many comparisons,
    concatenated: ``values`` and each value's sizes, ``pair`` each comparison's pair."""

    def __init__(self, n_a: np.ndarray, n_b: np.ndarray, u_tol: float):
        pairs, inverse = distinct_rows(np.stack([n_a, n_b], axis=1))
        grids = [nuisance_grid(int(a), int(b), u_tol) for a, b in pairs]
        lengths = [len(grid) for grid in grids]
        self.start = np.cumsum([0] + lengths)
        self.values = np.concatenate(grids)
        self.n_a, self.n_b = np.repeat(pairs[:, 0], lengths), np.repeat(pairs[:, 1], lengths)
        self.pair = inverse

    def snap(self, which: np.ndarray, low, high) -> tuple[np.ndarray, np.ndarray]:
        """snap of [low, high] on the grid of comparison ``which`` (each), as indices into
        ``values``."""
        first, last = np.empty(len(which), "int64"), np.empty(len(which), "int64")
        pair = self.pair[which]
        order = np.argsort(pair, kind="stable")
        for rows in np.split(order, np.flatnonzero(np.diff(pair[order])) + 1):
            begin, end = self.start[pair[rows[0]]], self.start[pair[rows[0]] + 1]
            first[rows], last[rows] = snap(self.values[begin:end], low[rows], high[rows])
            first[rows] += begin
            last[rows] += begin
        return first, last


def _nuisance_values(n_a, n_b, u_tol: float, low, high) -> tuple[np.ndarray, np.ndarray]:
    """Each comparison's nuisance grid values spanning [low, high] (snap), concatenated: (the
    values, how many per comparison); one grid per distinct pair of sizes."""
    grids = NuisanceGrids(n_a, n_b, u_tol)
    first, last = grids.snap(np.arange(len(n_a)), low, high)
    return grids.values[ragged(first, last - first + 1)], last - first + 1


class _Layout:
    """Comparisons (one group the smaller in all) and their nuisance values laid out as rows, one
    per (comparison, value): per row its sizes and the smaller group's counts that matter at all
    of its comparison's values (count_window), padded to the widest."""

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
        start, self.width = count_windows(n_s, low, high)
        self.start = start
        columns = np.arange(int(self.width.max()))[None, :]
        self.kept = columns < self.width[self.owner, None]
        self.xs = start[self.owner, None] + np.minimum(columns, self.width[self.owner, None] - 1)
        self.probability = Probabilities(
            self.n_a, self.n_b, self.xs, p_b, u_tol, self.kept, self.owner
        )
        self.u_tol = u_tol

    def edges(self, t: np.ndarray) -> np.ndarray:
        """boundary's edges of {T >= t} in every row, ``t`` one per row."""
        return boundary(self.n_a[:, None], self.n_b[:, None], t, self.u_tol, self.xs)[1]


def nuisance_batches(n_a, n_b, low, high, u_tol: float) -> list[np.ndarray]:
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
    window = n_s * span + np.sqrt(n_s * np.log(2 / NEGLIGIBLE) * 2) + 2
    key = np.stack([a_small, np.ceil(np.log2(window)), np.ceil(np.log2(np.sqrt(n_l) + 1))], axis=1)
    inverse = distinct_rows(key)[1]
    order = np.argsort(inverse, kind="stable")
    return np.split(order, np.cumsum(np.bincount(inverse))[:-1])


def _suprema(n_a, n_b, t, u_tol: float, low, high) -> np.ndarray:
    """_supremum of each comparison (arrays), in batches of like sizes."""
    out = np.empty(len(n_a))
    for rows in nuisance_batches(n_a, n_b, low, high, u_tol):
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
