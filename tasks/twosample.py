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

Small samples (the smaller count n <= EXACT_LIMIT): each one-sided p-value is exact
unconditional (Barnard's construction): p = sup over the null boundary p_A = p_B + U_tol of
P(S >= t_obs), where S is T made monotone (S(x_A, x_B) = max of T over x_A' <= x_A, x_B' >= x_B, so
its upper sets are monotone and the supremum over H0 is on the boundary). The probability is a
sum over the smaller group's counts of its binomial pmf times the other group's binomial CDF at
the boundary of the region, and the supremum is taken on a grid of _GRID nuisance values refined
around its largest values. Large samples: the normal tail of T (the asymptotic test, accurate
there; benchmarks/calibration.py measures both).
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import special, stats

EXACT_LIMIT = 1000  # exact unconditional p-values where the smaller group's count is at most this
_GRID = 129  # nuisance values on the null boundary
_REFINE = 17  # extra values around each of the _PEAKS largest grid values
_PEAKS = 4
_TIE = 1e-9  # statistics within this (relative) of the observed one count as "as extreme"
_TABLE_RATIO = 10  # _grid_tails: a table at most this many times the smaller group's counts
_SPREAD = 5.0  # _grid_tails keeps the counts within this many √n of the mean
_WALK = 8  # _boundary: steps from the quadratic's root before it bisects instead


def statistic(x_a, n_a, x_b, n_b, u_tol=0.0) -> np.ndarray:
    """T = (m_A − m_B − U_tol)/s with Agresti-Caffo adjusted rates and variance (module doc)."""
    x_a, n_a, x_b, n_b = (np.asarray(v, dtype="float64") for v in (x_a, n_a, x_b, n_b))
    m_a, m_b = (x_a + 1) / (n_a + 2), (x_b + 1) / (n_b + 2)
    s = np.sqrt(m_a * (1 - m_a) / (n_a + 2) + m_b * (1 - m_b) / (n_b + 2))
    return (m_a - m_b - u_tol) / s


def _boundary(n_a: int, n_b: int, t: float, u_tol: float) -> tuple[bool, np.ndarray]:
    """The region {T >= t}, t > 0, described along the smaller group.

    Returns (a_small, edge). If A is the smaller group: the region is {x_B <= edge[x_A]} (edge −1:
    none). Otherwise: the region is {x_A >= edge[x_B]} (edge n_A + 1: none). Where T > 0 the
    numerator D = m_A − m_B − U_tol is positive, and there T decreases in x_B and increases in
    x_A (∂T/∂m_B = −(s + D·∂s/∂m_B)/s² < 0 because D·|1 − 2m_B|/(2(n_B + 2)) < m_B(1 − m_B)/(n_B + 2)
    <= s² when 0 < D < 1 − m_B; likewise for x_A), so each section of the region is an interval
    and the region is monotone, as Barnard's construction needs. Each section's end solves T = t:
    with y the larger group's adjusted rate, c the smaller's shifted by ∓U_tol and v its variance
    term, (c − y)² = t²(v + y(1 − y)/(n + 2)) is a quadratic in y; its root, rounded to a count,
    is then checked and moved against T itself, so rounding never moves an edge (a root more
    than _WALK counts off, a tie at the tolerance or no real root: bisection instead).
    """
    a_small = n_a <= n_b
    small, large = (n_a, n_b) if a_small else (n_b, n_a)
    xs = np.arange(small + 1, dtype="float64")
    threshold = t - _TIE * (1 + abs(t))

    def inside(x_large):
        if a_small:
            return statistic(xs, n_a, x_large, n_b, u_tol) >= threshold
        return statistic(x_large, n_a, xs, n_b, u_tol) >= threshold

    m = (xs + 1) / (small + 2)
    c, v = (m - u_tol if a_small else m + u_tol), m * (1 - m) / (small + 2)
    k = threshold**2 / (large + 2)
    b = 2 * c + k
    discriminant = b**2 - 4 * (1 + k) * (c**2 - threshold**2 * v)
    if threshold <= 0 or (discriminant < 0).any():  # a tie at the tolerance, or U_tol near 1
        return a_small, _bisected_edges(a_small, small, large, inside)
    root = np.sqrt(discriminant)
    if a_small:  # largest x_B whose rate is at most the smaller root
        edge = np.floor((b - root) / (2 * (1 + k)) * (large + 2) - 1)
    else:  # smallest x_A whose rate is at least the larger root
        edge = np.ceil((b + root) / (2 * (1 + k)) * (large + 2) - 1)
    edge = np.clip(edge, -1, large + 1)
    step = 1 if a_small else -1  # the direction that takes in more of the larger group's counts
    for _ in range(_WALK):  # out to the last count inside, in from the first outside: T decides
        ahead = edge + step
        grow = (ahead >= 0) & (ahead <= large) & inside(np.clip(ahead, 0, large))
        shrink = (edge >= 0) & (edge <= large) & ~inside(np.clip(edge, 0, large))
        if not (grow.any() or shrink.any()):
            return a_small, _monotone(a_small, edge.astype("int64"))
        edge = edge + step * (grow.astype("int64") - shrink.astype("int64"))
    return a_small, _bisected_edges(a_small, small, large, inside)  # the root was far off


def _bisected_edges(a_small: bool, small: int, large: int, inside) -> np.ndarray:
    """_boundary's edges by bisection over the larger group's counts (log2 of them evaluations
    of T), where the quadratic's root is no guide."""
    # a_small: largest x_B inside (prefix); else: smallest x_A inside (suffix)
    lo = np.full(small + 1, -1.0 if a_small else 0.0)
    hi = np.full(small + 1, float(large) if a_small else large + 1.0)
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
        edge = np.where(inside(np.full(small + 1, float(large))), large, lo)
    else:
        edge = np.where(inside(np.zeros(small + 1)), 0, hi)
    return _monotone(a_small, edge.astype("int64"))


def _monotone(a_small: bool, edge: np.ndarray) -> np.ndarray:
    """The region's monotone hull along the smaller group (Barnard's construction)."""
    if a_small:
        return np.maximum.accumulate(edge)
    return np.minimum.accumulate(edge[::-1])[::-1]


@functools.lru_cache(maxsize=8)
def _log_choose(n: int) -> np.ndarray:
    """log C(n, k) for k = 0 .. n, once per n (read by _log_pmf for every nuisance value)."""
    k = np.arange(n + 1, dtype="float64")
    return special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)


def _log_pmf(k: np.ndarray, n: int, p: np.ndarray) -> np.ndarray:
    """log Binomial(n, p) pmf at counts k (row, or one row per p) for probabilities p (column)."""
    log_choose = _log_choose(int(n))[k.astype("int64")]
    with np.errstate(divide="ignore", invalid="ignore"):
        return log_choose + special.xlogy(k, p) + special.xlog1py(n - k, -p)


def _small_pmf(
    n_a, n_b, a_small, p_b, u_tol
) -> tuple[np.ndarray, tuple[np.ndarray, ...], np.ndarray]:
    """The smaller group's pmf at p_B = each of ``p_b`` (p_A = p_B + U_tol), where it is not
    negligible (its rows and columns), and the larger group's rate per row."""
    p_b = np.asarray(p_b, dtype="float64")[:, None]
    p_a = np.minimum(p_b + u_tol, 1.0)
    n_s, p_s, p_l = (n_a, p_a, p_b) if a_small else (n_b, p_b, p_a)
    k = np.arange(n_s + 1, dtype="float64")[None, :]
    pmf = np.exp(_log_pmf(k, n_s, p_s))
    keep = pmf > 1e-18
    return pmf, np.nonzero(keep), p_l[:, 0]


@functools.lru_cache(maxsize=64)
def _grid_pmf(n_a: int, n_b: int, a_small: bool, u_tol: float):
    """_small_pmf on the nuisance grid of _supremum: the same for every region of a pair of
    sizes, so computed once per pair (planning's bisection asks for dozens of regions)."""
    return _small_pmf(n_a, n_b, a_small, _grid(u_tol), u_tol)


@functools.lru_cache(maxsize=4)
def _grid_tails(
    n_a: int, n_b: int, a_small: bool, u_tol: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """_tails on the nuisance grid of _supremum."""
    return _tails(n_a, n_b, a_small, _grid(u_tol), u_tol)


@functools.lru_cache(maxsize=8)
def _refinement(n_a: int, n_b: int, a_small: bool, u_tol: float, peaks: tuple[int, ...]):
    """The refined nuisance values of _supremum around the grid's ``peaks`` (grid indices), the
    smaller group's pmf and the larger group's tails there: successive regions of planning's
    bisection mostly peak at the same grid values, so these are computed once."""
    grid = _grid(u_tol)
    step = grid[1] - grid[0]
    fine = np.clip(
        (grid[list(peaks)][:, None] + np.linspace(-step, step, _REFINE)[None, :]).ravel(),
        0,
        1.0 - u_tol,
    )
    pmf = _small_pmf(n_a, n_b, a_small, fine, u_tol)
    return fine, pmf, _tails(n_a, n_b, a_small, fine, u_tol)


def _tails(
    n_a: int, n_b: int, a_small: bool, p_b: np.ndarray, u_tol: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """The larger group's tail at p_B = each of ``p_b`` (p_A = p_B + U_tol): its CDF
    P(X <= k) when A is the smaller group, else its survival P(X >= k) (the tails
    _region_probability takes), by cumulative sums of its pmf: within 1e-12 of scipy's binomial
    CDF up to n ~ 1,000, 1e-9 at n ~ 10⁴ and 5e-9 at n ~ 10⁶, where the log-gamma of n carries
    the rounding (tested up to 12,000; 5e-9 measured). For the dozens of regions planning's bisection
    assesses at the same nuisance values. Per row only the counts within _SPREAD·√n of the mean
    are kept (outside, Hoeffding bounds the mass by 2·exp(−2·_SPREAD²) < 1e-21: the tail there is
    0 or 1), so a reference of millions takes a table of thousands of columns.

    Returns (first, table): row r holds the tail at counts first[r] − 1 .. first[r] + width, its
    first and last columns the constant tail beyond the kept counts. None where the table would
    be wider than _TABLE_RATIO times the smaller group's counts: the binomial CDF at the few
    edges of each region is then cheaper (benchmarks/README.md, fixed costs)."""
    n_l, n_s = (n_b, n_a) if a_small else (n_a, n_b)
    width = min(n_l + 1, 2 * int(np.ceil(_SPREAD * np.sqrt(n_l))) + 1)
    if width > _TABLE_RATIO * (n_s + 1):
        return None
    p_l = p_b if a_small else np.minimum(p_b + u_tol, 1.0)
    first = np.clip(np.round(n_l * p_l).astype("int64") - width // 2, 0, n_l + 1 - width)
    counts = (first[:, None] + np.arange(width)[None, :]).astype("float64")
    pmf = np.exp(_log_pmf(counts, n_l, p_l[:, None]))
    if a_small:  # CDF; 1 exactly where the kept counts reach n
        tails = np.cumsum(pmf, axis=1)
        tails[first + width - 1 == n_l, -1] = 1.0
        beyond = (0.0, 1.0)
    else:  # survival; 1 exactly where the kept counts start at 0
        tails = np.cumsum(pmf[:, ::-1], axis=1)[:, ::-1]
        tails[first == 0, 0] = 1.0
        beyond = (1.0, 0.0)
    padded = np.pad(np.minimum(tails, 1.0), ((0, 0), (1, 1)), constant_values=(beyond, beyond))
    return first, padded


def _grid(u_tol: float) -> np.ndarray:
    return np.linspace(0.0, 1.0 - u_tol, _GRID)


def _region_probability(
    n_a, n_b, a_small, edge, p_b, u_tol, small_pmf=None, tails=None
) -> np.ndarray:
    """P(region) at p_B = each of ``p_b`` and p_A = p_B + U_tol: the smaller group's pmf times
    the larger group's CDF (or SF) at the region's edge, summed where the pmf is not negligible
    (``small_pmf``: that pmf, from _small_pmf with the same arguments, when already known;
    ``tails``: the larger group's tails at ``p_b``, from _grid_tails, when already known)."""
    pmf, (rows, cols), p_l = small_pmf or _small_pmf(n_a, n_b, a_small, p_b, u_tol)
    if tails is not None:  # the table's column of count k is k − first + 1, clipped to its ends
        first, table = tails
        tail = table[rows, np.clip(edge[cols] - first[rows] + 1, 0, table.shape[1] - 1)]
    else:
        tail = _binomial_tail(a_small, n_b if a_small else n_a, edge[cols], p_l[rows])
    out = np.zeros(pmf.shape)
    out[rows, cols] = pmf[rows, cols] * tail
    return out.sum(axis=1)


def _binomial_tail(a_small: bool, n_l: int, edge: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The larger group's CDF P(X <= edge) (A smaller; edge −1: 0, n: 1) or survival
    P(X >= edge) = bdtrc(edge − 1) (B smaller; edge 0: 1, n + 1: 0) at rates ``p``."""
    cut = edge.astype("float64")
    if a_small:
        inner = special.bdtr(np.clip(cut, 0, n_l), n_l, p)
        return np.where(cut < 0, 0.0, np.where(cut >= n_l, 1.0, inner))
    inner = special.bdtrc(np.clip(cut - 1, 0, n_l), n_l, p)
    return np.where(cut <= 0, 1.0, np.where(cut > n_l, 0.0, inner))


def _supremum(
    n_a: int, n_b: int, a_small: bool, edge: np.ndarray, u_tol: float, above: float = np.inf
) -> float:
    """sup over p_B in [0, 1 − U_tol] of P(region): a grid, refined around its largest values.

    With ``above``: once the grid alone shows the supremum is above it, that grid value is
    returned unrefined (enough for the caller's comparison with ``above``)."""
    grid = _grid(u_tol)
    values = _region_probability(
        n_a,
        n_b,
        a_small,
        edge,
        grid,
        u_tol,
        _grid_pmf(n_a, n_b, a_small, u_tol),
        _grid_tails(n_a, n_b, a_small, u_tol),
    )
    if min(1.0, values.max()) > above:
        return float(min(1.0, values.max()))
    peaks = tuple(sorted(int(i) for i in np.argsort(values)[-_PEAKS:]))
    fine, pmf, tails = _refinement(n_a, n_b, a_small, u_tol, peaks)
    refined = _region_probability(n_a, n_b, a_small, edge, fine, u_tol, pmf, tails)
    return float(min(1.0, max(values.max(), refined.max())))


def exact_one_sided(x_a: int, n_a: int, x_b: int, n_b: int, u_tol: float = 0.0) -> float:
    """Exact unconditional p-value of H0: p_A − p_B <= U_tol against p_A − p_B > U_tol.

    1 where T <= 0 (the estimate is not above the tolerance: a valid, conservative p-value; the
    test cannot reject there at any level below 1/2)."""
    t = float(statistic(x_a, n_a, x_b, n_b, u_tol))
    if t <= 0:
        return 1.0
    a_small, edge = _boundary(int(n_a), int(n_b), t, u_tol)
    return _supremum(int(n_a), int(n_b), a_small, edge, u_tol)


def is_exact(n_a, n_b, exact_limit: int = EXACT_LIMIT) -> np.ndarray:
    """Where the exact unconditional p-value is used: the smaller count is at most the limit."""
    return np.minimum(np.asarray(n_a), np.asarray(n_b)) <= exact_limit


def two_sample_test(
    x_a, n_a, x_b, n_b, u_tol: float = 0.0, exact_limit: int = EXACT_LIMIT
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Test of |p_A − p_B| > U_tol for each element: (z of the larger side, p-value, exact?).

    p = min(1, 2·min(p_up, p_down)); each side exact unconditional where ``is_exact``, normal
    otherwise. Rows with a zero count are the caller's to mask (their p here is 1).
    """
    x_a, n_a, x_b, n_b = np.broadcast_arrays(
        *(np.asarray(v, dtype="float64") for v in (x_a, n_a, x_b, n_b))
    )
    z_up, z_down = statistic(x_a, n_a, x_b, n_b, u_tol), statistic(x_b, n_b, x_a, n_a, u_tol)
    p_up, p_down = stats.norm.sf(z_up), stats.norm.sf(z_down)
    exact = is_exact(n_a, n_b, exact_limit) & (n_a > 0) & (n_b > 0)
    p_up, p_down = np.array(p_up, ndmin=1), np.array(p_down, ndmin=1)
    flat = [np.ravel(v) for v in (x_a, n_a, x_b, n_b)]
    for i in np.flatnonzero(np.ravel(exact)):
        xa, na, xb, nb = (int(v[i]) for v in flat)
        p_up.flat[i] = exact_one_sided(xa, na, xb, nb, u_tol)
        p_down.flat[i] = exact_one_sided(xb, nb, xa, na, u_tol)
    p = np.minimum(1.0, 2 * np.minimum(p_up, p_down)).reshape(np.shape(x_a))
    return np.maximum(z_up, z_down), p, exact


def critical_value(n_a: int, n_b: int, u_tol: float, level: float) -> float:
    """Smallest observed statistic T whose exact one-sided p-value is <= ``level`` (inf: none).

    The one-sided test rejects exactly where T >= this value (p is non-increasing in T), so the
    whole rejection region of a sample size is known without testing every table.
    """
    x_a = np.arange(n_a + 1, dtype="float64")[:, None]
    x_b = np.arange(n_b + 1, dtype="float64")[None, :]
    candidates = np.unique(statistic(x_a, n_a, x_b, n_b, u_tol))
    candidates = candidates[candidates > 0]
    if candidates.size == 0:
        return float("inf")

    def p_value(t):
        return _supremum(n_a, n_b, *_boundary(n_a, n_b, t, u_tol), u_tol)

    if p_value(candidates[-1]) > level:
        return float("inf")
    lo, hi = 0, len(candidates) - 1  # invariant: p(candidates[hi]) <= level
    while lo < hi:
        mid = (lo + hi) // 2
        p = p_value(candidates[mid])
        if p <= level:
            hi = mid
        else:
            lo = mid + 1
    return float(candidates[hi])


@functools.lru_cache(maxsize=4096)
def critical_statistic(n_a: int, n_b: int, u_tol: float, level: float, steps: int = 16) -> float:
    """The one-sided exact test's critical value by bisection on T itself (no list of every
    table's statistic): the smallest t > 0, to ~1e-4 (a table's statistic closer than that to
    it may fall on either side: a negligible share of power), with sup_H0 P(T >= t) <= ``level``.
    Cached: planning asks for the same sizes and level again and again. Statistics t that give
    the same region give the same answer, so each region is assessed once."""
    seen: dict[tuple[bool, bytes], bool] = {}

    def too_likely(t: float) -> bool:  # sup_H0 P(T >= t) > level
        a_small, edge = _boundary(n_a, n_b, t, u_tol)
        key = (a_small, edge.tobytes())
        if key not in seen:
            seen[key] = _supremum(n_a, n_b, a_small, edge, u_tol, above=level) > level
        return seen[key]

    lo, hi = 0.0, float(stats.norm.isf(level)) + 2.0
    while too_likely(hi):
        lo, hi = hi, 2 * hi
        if hi > 1e6:
            return float("inf")
    for _ in range(steps):
        mid = (lo + hi) / 2
        if too_likely(mid):
            lo = mid
        else:
            hi = mid
    return hi


def exact_power(n_a: int, n_b: int, p_a: float, p_b: float, u_tol: float, level: float) -> float:
    """P(the two-sided exact test rejects at ``level``) at true rates (p_A, p_B): the sum over
    the smaller group of its pmf times the other group's tail beyond each side's region edge."""
    power = 0.0
    for na, nb, pa, pb in ((n_a, n_b, p_a, p_b), (n_b, n_a, p_b, p_a)):
        t = critical_statistic(int(na), int(nb), float(u_tol), float(level) / 2)
        if np.isfinite(t):
            a_small, edge = _boundary(na, nb, t, u_tol)
            power += float(_region_probability(na, nb, a_small, edge, [pb], pa - pb)[0])
    return min(power, 1.0)


def rejection_region(n_a: int, n_b: int, u_tol: float, alpha: float) -> np.ndarray:
    """Boolean (n_A + 1, n_B + 1) table: where the two-sided exact test rejects at ``alpha``."""
    x_a = np.arange(n_a + 1, dtype="float64")[:, None]
    x_b = np.arange(n_b + 1, dtype="float64")[None, :]
    up = critical_value(n_a, n_b, u_tol, alpha / 2)
    down = critical_value(n_b, n_a, u_tol, alpha / 2)
    threshold_up, threshold_down = up - _TIE * (1 + abs(up)), down - _TIE * (1 + abs(down))
    return (statistic(x_a, n_a, x_b, n_b, u_tol) >= threshold_up) | (
        statistic(x_b, n_b, x_a, n_a, u_tol) >= threshold_down
    )


def rejection_probability(region: np.ndarray, p_a, p_b) -> np.ndarray:
    """P(reject) = Σ pmf_A pmf_B over the region, for each pair of true rates (enumeration)."""
    n_a, n_b = region.shape[0] - 1, region.shape[1] - 1
    p_a, p_b = np.atleast_1d(np.asarray(p_a, float)), np.atleast_1d(np.asarray(p_b, float))
    pmf_a = stats.binom.pmf(np.arange(n_a + 1)[None, :], n_a, p_a[:, None])
    pmf_b = stats.binom.pmf(np.arange(n_b + 1)[None, :], n_b, p_b[:, None])
    return np.einsum("ki,ij,kj->k", pmf_a, region.astype("float64"), pmf_b)


def normal_power(p_a, n_a, p_b, n_b, u_tol: float, level: float) -> np.ndarray:
    """Power of the asymptotic two-sided test at true rates (p_A, p_B), same variance as T:
    Φ((U − U_tol)/s − z) + Φ((−U − U_tol)/s − z), z = z_{1−level/2}, s² = Σ p(1 − p)/(n + 2)."""
    p_a, n_a, p_b, n_b = (np.asarray(v, dtype="float64") for v in (p_a, n_a, p_b, n_b))
    s = np.sqrt(p_a * (1 - p_a) / (n_a + 2) + p_b * (1 - p_b) / (n_b + 2))
    z = stats.norm.ppf(1 - level / 2)
    u = p_a - p_b
    with np.errstate(divide="ignore", invalid="ignore"):
        return stats.norm.cdf((u - u_tol) / s - z) + stats.norm.cdf((-u - u_tol) / s - z)
