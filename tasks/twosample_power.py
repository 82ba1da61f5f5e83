"""The exact power of the two-sample test (tasks.twosample) and its critical regions, and its
normal limit (normal_power, skewness_term: where planning may take it instead).

The power at true rates (p_A, p_B) is the probability that the test rejects: a sum over the
smaller group's counts of its binomial pmf times the larger group's tail beyond the rejection
region's edge, the edge found from critical statistics c (each side rejects where its supremum
over the confidence set's null boundary is at most level/2 − γ, so where T >= c at every
nuisance value: _critical_statistics). Planning reports it (tasks.planning); small groups are
proven against the enumeration of every table's p-value (``rejection_region``,
``rejection_probability``).
"""

from __future__ import annotations

import numpy as np
from scipy import special

from biasaudit.tasks import distributions
from biasaudit.tasks.arrays import distinct_rows, ragged
from biasaudit.tasks.twosample import (
    GAMMA,
    NEGLIGIBLE,
    SPREAD,
    TIE,
    NuisanceGrids,
    Probabilities,
    binomial_tail,
    boundary,
    clopper_pearson,
    count_windows,
    end_tail,
    interval_end,
    nuisance_batches,
    statistic,
    two_sample_test,
)

_BRACKET = 0.05  # exact_power: a cold search's first step (doubled until it brackets c)
_STRIDE = 4  # _critical_statistics: a size pair's nuisance values searched cold, one in this many
_STEPS = 400  # exact_power: their search's steps, at most
_CELLS = 2**21  # _critical_statistics: rows searched together hold about this many cells
_FEW = 64  # _searched_critical: tables between a bracket's ends it sorts to place c among them
_ZONED = 16  # _Zoned: edges found in the middle run only where the larger group is this much larger
_SATURATED = 1e-6  # _corner_bounds: a power this close to 1 is its bound, low by at most this
_OUTSIDE = 1e-13  # exact_powers: mass of each group's counts left out in each tail, by default
_RATE_DIGITS = 12  # exact_powers: true rates equal to this many decimals are computed once
NORMAL_SKEW = 0.005  # skewness_term at or below which planning takes normal_power (the grid)
NORMAL_LEVEL = 1e-6  # ... and levels at or above which (the grid's smallest: below it, exact)


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


def normal_power(
    p_a, n_a, p_b, n_b, u_tol: float, level: float, *, null_sides: bool = True, gamma: float = 0.0
) -> np.ndarray:
    """Power of the asymptotic two-sided test at true rates (p_A, p_B), T's numerator at its
    mean: Φ((U − U_tol)/s − z) + Φ((−U − U_tol)/s − z), z = z_{1−level/2}, U = m̄_A − m̄_B and
    s² = Σ m̄(1 − m̄)/(n + 2) at the adjusted rates' means m̄ = (n·p + 1)/(n + 2) (Agresti-Caffo,
    tasks.twosample: m − p is (1 − 2p)/(n + 2), about 0.01 standard errors at n·p(1 − p) = 10⁴).
    ``null_sides`` False leaves out a side whose null holds at the true rates (p_A − p_B within
    the tolerance on that side, as exact_powers). ``gamma``: each side at level/2 − γ, as the
    Berger-Boos test rejects (GAMMA for planning; power 0 where level/2 <= γ, as the test's)."""
    p_a, n_a, p_b, n_b = (np.asarray(v, dtype="float64") for v in (p_a, n_a, p_b, n_b))
    if level / 2 <= gamma:
        return np.zeros(np.broadcast(p_a, n_a, p_b, n_b).shape)
    m_a, m_b = (n_a * p_a + 1) / (n_a + 2), (n_b * p_b + 1) / (n_b + 2)
    s = np.sqrt(m_a * (1 - m_a) / (n_a + 2) + m_b * (1 - m_b) / (n_b + 2))
    z = distributions.norm_isf(level / 2 - gamma)
    u = m_a - m_b
    with np.errstate(divide="ignore", invalid="ignore"):
        up = distributions.norm_cdf((u - u_tol) / s - z)
        down = distributions.norm_cdf((-u - u_tol) / s - z)
    if null_sides:
        return up + down
    return np.where(p_a - p_b > u_tol, up, 0.0) + np.where(p_b - p_a > u_tol, down, 0.0)


def skewness_term(n_a, n_b, p_a, p_b, u_tol: float, level: float) -> np.ndarray:
    """κ = (z² + 1)/(6√v), z = z_{1−level/2}, v the smallest of n·p(1 − p) over the two groups at
    their true rates and group A at the null boundary nearest them (p_B ± U_tol): an index of how
    far the binomial tails where the test's critical statistics sit are from the normal limit,
    of the order of the first Edgeworth term (skewness/6 times a quadratic in z, skewness at most
    1/√v: Hall 1992, The Bootstrap and Edgeworth Expansion, chapter 2), calibrated on the grid of
    benchmarks/planning_accuracy.py: normal_power is within 0.005 of exact_powers on the grid's
    cells where κ <= NORMAL_SKEW and the level is at least NORMAL_LEVEL."""
    n_a, n_b, p_a, p_b = (np.asarray(v, dtype="float64") for v in (n_a, n_b, p_a, p_b))
    nearest = np.clip(p_b + np.where(p_a >= p_b, u_tol, -u_tol), 0.0, 1.0)
    v = np.minimum.reduce(
        [n_a * p_a * (1 - p_a), n_b * p_b * (1 - p_b), n_a * nearest * (1 - nearest)]
    )
    z = distributions.norm_isf(level / 2)
    with np.errstate(divide="ignore"):
        return (z**2 + 1) / (6 * np.sqrt(v))


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
    """_searched_critical of rows in batches of like sizes (nuisance_batches) and bounded memory."""
    out = np.empty(len(p_b))
    n_s, n_l = np.minimum(n_a, n_b), np.maximum(n_a, n_b)
    # a row's arrays: its window of the smaller group's counts and the larger group's tail table
    cells = 2 * np.sqrt(n_s * np.log(2 / NEGLIGIBLE) / 2) + 2 * SPREAD * np.sqrt(n_l) + 4
    for batch in nuisance_batches(n_a, n_b, p_b, p_b, u_tol):
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
    smaller group that matter at its nuisance value (count_window, padded to the widest), which of
    them are kept (not padding), and P(S >= t) of the rows (_Zoned)."""
    a_small = bool(n_a[0] <= n_b[0])
    n_s = n_a if a_small else n_b
    p_s = np.minimum(p_b + u_tol, 1.0) if a_small else p_b
    start, width = count_windows(n_s, p_s, p_s)
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
    T > 0, boundary), adding its probability (``probability``'s pmf of x_s times the larger
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
    out[stop] = table[index[at]] + 2 * TIE * (1 + np.abs(table[index[at]]))
    return out


class _Zoned:
    """P(S >= t) of rows of like sizes (_searched_critical), the region's edge found only at the
    smaller group's counts where it falls among the larger group's counts Probabilities keeps.

    The edge grows with the smaller group's count (the region is monotone where T > 0,
    boundary), so along a row the counts split in three runs: edge below the kept counts (the
    larger group's tail there exactly 0, or 1 for B's survival), among them, and above (1, or 0).
    Two binary searches on T at the kept counts' ends find the runs; the edge is computed in the
    middle one only (a few of the row's counts when the larger group is far larger: each count of
    the smaller moves the edge by several of the larger's standard errors), the outer runs' mass
    is a difference of the row's cumulative pmf. The result is Probabilities of boundary's
    edges over the whole row. Rows of groups of like sizes (the larger less than _ZONED times the
    smaller) have most counts in the middle run: there the edges are found at every count."""

    def __init__(self, n_a, n_b, xs: np.ndarray, p_b, u_tol: float, width: np.ndarray):
        kept = np.arange(xs.shape[1])[None, :] < width[:, None]
        self.probability = Probabilities(n_a, n_b, xs, p_b, u_tol, kept, np.arange(len(p_b)))
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
            edges = boundary(*sizes, t, self.u_tol, self.xs[rows])[1]
            return self.probability(edges, rows=rows), edges
        threshold = t - TIE * (1 + np.abs(t))
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
        middle = boundary(*sizes, t, self.u_tol, x_s)[1]
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


def _segment_hull(a_small: bool, edge: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """monotone of each comparison's edges, the cells laid out by comparison (``owner``, non-
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
        interval_end(lo_a, n_a, gamma, upper=False),
        interval_end(hi_b, n_b, gamma, upper=True),
    )
    a_high, b_low = (
        interval_end(hi_a, n_a, gamma, upper=True),
        interval_end(lo_b, n_b, gamma, upper=False),
    )
    grids = NuisanceGrids(n_a, n_b, u_tol)
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
        raw = boundary(*sizes, t[owner[cells]], u_tol, xs[cells, None])[1][:, 0]
        edge[cells] = _segment_hull(a_small, raw, owner[cells])
        return edge

    sure = edges(c_max)
    sure = np.where(np.isnan(sure), h1, toward(sure, h1))
    # the sure region's kept tables only: beyond the larger group's kept counts the nuisance
    # span (from the kept counts' intervals) does not hold their critical statistics
    n_cell, p_cell = n_l[owner], p_l[owner]
    if a_small:  # P(lo_l <= X <= min(sure, hi_l))
        tail = binomial_tail(True, n_cell, np.minimum(sure, hi_l[owner]), p_cell)
        tail -= binomial_tail(True, n_cell, lo_l[owner] - 1, p_cell)
    else:  # P(max(sure, lo_l) <= X <= hi_l)
        tail = binomial_tail(False, n_cell, np.maximum(sure, lo_l[owner]), p_cell)
        tail -= binomial_tail(False, n_cell, hi_l[owner] + 1, p_cell)
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
    in_h1 = interval_end(k_a, n_a, gamma, upper=False) - u_tol > interval_end(
        k_b, n_b, gamma, upper=True
    )
    positive = statistic(k_a, n_a, k_b, n_b, u_tol) > 0
    bound = distributions.binom_sf(k_a - 1, n_a, p_a) * distributions.binom_cdf(k_b, n_b, p_b)
    return bound, in_h1 & positive & (bound >= 1 - _SATURATED)


def _undecided_power(a_small: bool, comparisons, cells, nuisance, u_tol: float, gamma: float):
    """Per comparison, the probability of its tables between the regions {T >= max c} and
    {T >= min c} that the test rejects: x_l in [start, stop) beside each cell's count x_s.

    A table rejects where T >= W, W the largest critical statistic over its segment's grid
    values [lo, hi] (snap). Along x_l the smaller group's interval is fixed, so lo and hi move
    only where the larger group's interval passes a grid value g_j: by the intervals' duality
    with the binomial tails (as _h1_edges), its lower end reaches g_j (rate g_j + U_tol when the
    larger group is A) from x_l = Q_j on and its upper end passes it from x_l = R_j on, binomial
    quantiles. Between such points W is constant and T monotone in x_l, so the tables that
    reject are the part of the run inside {T >= W} (boundary): one binomial CDF difference per
    run instead of one decision per table. Only grid values within the comparison's own span
    [first, last] move lo and hi (a table outside H1 has its segment inside that span)."""
    n_a, n_b, n_l, p_l = comparisons
    owner, xs, pmf_s, start, stop = cells
    grids, first, last, critical, rank = nuisance
    tail = end_tail(gamma)
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
        edge[finite] = boundary(*sizes, worst[finite], u_tol, xs[run_cell[finite], None])[1][:, 0]
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
    tail = end_tail(gamma)
    if a_small:
        v = interval_end(xs, n_a, gamma, upper=False) - u_tol
        edge = distributions.binom_ppf(tail, n_b, np.clip(v, 0.0, 1.0)) - 1
        return np.where(v > 0, edge, -1.0)
    v = interval_end(xs, n_b, gamma, upper=True) + u_tol
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
