"""Detection's p-values of many tables at once equal those of one table at a time."""

import numpy as np
import pytest

from biasaudit.tasks import twosample, twosample_power


def smaller_counts(n_a: int, n_b: int, p_b: np.ndarray, u_tol: float) -> np.ndarray:
    """The smaller group's counts that matter at every nuisance value ``p_b`` (_window)."""
    if n_a <= n_b:
        return twosample.count_window(n_a, min(p_b[0] + u_tol, 1.0), min(p_b[-1] + u_tol, 1.0))
    return twosample.count_window(n_b, p_b[0], p_b[-1])


def one_at_a_time(x_a, n_a, x_b, n_b, u_tol, gamma=twosample.GAMMA) -> float:
    """The one-sided Berger-Boos p-value of one table, as computed before the batching: its own
    nuisance grid values, its own window of the smaller group's counts, its own region."""
    t = float(twosample.statistic(x_a, n_a, x_b, n_b, u_tol))
    if t <= 0:
        return 1.0
    low, high, empty = twosample._segment(x_a, n_a, x_b, n_b, u_tol, gamma)
    if empty:
        return gamma
    grid = twosample.nuisance_grid(n_a, n_b, u_tol)
    first, last = twosample.snap(grid, float(low), float(high))
    p_b = grid[first : last + 1]
    xs = smaller_counts(n_a, n_b, p_b, u_tol)
    _, edge = twosample.boundary(n_a, n_b, t, u_tol, xs)
    sup = float(twosample.Probabilities(n_a, n_b, xs, p_b, u_tol)(edge).max())
    return min(1.0, gamma + sup)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("u_tol", [0.0, 0.05])
def test_batched_p_values_equal_one_table_at_a_time(seed, u_tol):
    """400 random tables (groups of 1 to 400,000, either one the smaller, repeats included):
    two_sample_test's p-values, computed in batches of like sizes with each distinct table
    once, equal the two-sided p-values of each table alone to 1e-12."""
    rng = np.random.default_rng(seed)
    size = 400
    n_a = rng.choice([1, 2, 5, 13, 40, 150, 900, 3_000, 20_000, 200_000], size)
    n_b = rng.choice([1, 3, 8, 60, 400, 5_000, 100_000, 400_000], size)
    n_a, n_b = n_a + rng.integers(0, 5, size), n_b + rng.integers(0, 5, size)
    rate = rng.uniform(0.05, 0.9, size)
    x_a = rng.binomial(n_a, rate)
    x_b = rng.binomial(n_b, np.clip(rate + rng.normal(0, 0.1, size), 0, 1))
    x_a[:20], n_a[:20], x_b[:20], n_b[:20] = x_a[20:40], n_a[20:40], x_b[20:40], n_b[20:40]
    _, p, _ = twosample.two_sample_test(x_a, n_a, x_b, n_b, u_tol)
    expected = [
        min(1.0, 2 * min(one_at_a_time(*v, u_tol), one_at_a_time(*v[2:], *v[:2], u_tol)))
        for v in zip(x_a.tolist(), n_a.tolist(), x_b.tolist(), n_b.tolist())
    ]
    assert (p < 1).sum() > 100  # most tables reach the supremum
    np.testing.assert_allclose(p, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("u_tol", [0.0, 0.05])
def test_powers_of_many_comparisons_equal_each_alone(u_tol):
    """exact_powers of 40 comparisons at once (either group the smaller, sizes repeated so they
    share critical statistics, both sides) equals exact_power of each alone to 1e-12, and with
    planning's precision (1e-4) it is at most 2e-4 below."""
    rng = np.random.default_rng(7)
    size = 40
    n_a = rng.choice([3, 12, 40, 150, 900, 5_000], size).astype(float)
    n_b = rng.choice([4, 30, 300, 2_000, 40_000], size).astype(float)
    n_a[20:], n_b[20:] = n_a[:20], n_b[:20]
    p_b = rng.uniform(0.1, 0.8, size)
    p_a = np.clip(p_b + rng.choice([-0.2, -0.1, 0.0, 0.1, 0.2], size), 0.02, 0.98)
    level = 0.003
    together = twosample_power.exact_powers(n_a, n_b, p_a, p_b, u_tol, level)
    alone = [twosample_power.exact_power(*v, u_tol, level) for v in zip(n_a, n_b, p_a, p_b)]
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-12)
    assert (together > 0.01).sum() > 10  # most are not trivially zero
    coarse = twosample_power.exact_powers(n_a, n_b, p_a, p_b, u_tol, level, precision=1e-4)
    assert np.all(coarse <= together + 1e-12) and np.all(together - coarse <= 2e-4)


def test_powers_near_one_are_their_corner_bound(monkeypatch):
    """Large groups far beyond the tolerance: the power from the corner of tables in H1 (no
    critical statistic) is within 1e-6 below the full computation's, never above it; groups
    nearer the tolerance are computed in full, as before."""
    rng = np.random.default_rng(11)
    size = 24
    n_a = rng.choice([2_000, 20_000, 80_000, 300_000], size).astype(float)
    n_b = rng.choice([50_000, 400_000, 2_000_000], size).astype(float)
    p_b = rng.uniform(0.2, 0.7, size)
    p_a = p_b + rng.choice([0.06, 0.1, 0.15], size)
    u_tol, level = 0.05, 1e-4
    fast = twosample_power.exact_powers(n_a, n_b, p_a, p_b, u_tol, level, null_sides=False)

    def none(n_a, n_b, p_a, p_b, u_tol, gamma):
        return np.zeros(len(n_a)), np.zeros(len(n_a), bool)

    monkeypatch.setattr(twosample_power, "_corner_bounds", none)
    full = twosample_power.exact_powers(n_a, n_b, p_a, p_b, u_tol, level, null_sides=False)
    assert np.all(fast <= full + 1e-12) and np.all(full - fast <= twosample_power._SATURATED)
    assert ((full - fast) > 1e-12).sum() >= 5  # the bound served some, and was not exact
    assert (full < 0.99).sum() >= 3  # others are not near one


@pytest.mark.parametrize(("n_s", "n_l"), [(40, 5_000), (700, 400_000), (3_000, 60_000)])
@pytest.mark.parametrize("a_small", [True, False])
def test_zoned_probabilities_equal_those_over_every_count(n_s, n_l, a_small):
    """Planning's search finds the region's edge only where it falls among the larger group's
    kept counts: its P(S >= t) and edges equal Probabilities of boundary over every count of
    the smaller group within the tails' own rounding (binomial CDF or table: 1e-9 beyond n =
    1,000; the outer runs' edges stand at the kept counts' ends), and a part of the rows
    evaluated alone (the search evaluates only its open rows) equals the same rows of the whole."""
    rows = 12
    n_a, n_b = (np.full(rows, float(n_s)), np.full(rows, float(n_l)))
    if not a_small:
        n_a, n_b = n_b, n_a
    p_b = np.linspace(0.2, 0.6, rows)
    u_tol = 0.05
    p_s = np.minimum(p_b + u_tol, 1.0) if a_small else p_b
    start, width = twosample.count_windows(n_s, p_s, p_s)
    xs = start[:, None] + np.minimum(np.arange(width.max())[None, :], width[:, None] - 1)
    zoned = twosample_power._Zoned(n_a, n_b, xs, p_b, u_tol, width)
    assert zoned.zoned
    kept = np.arange(xs.shape[1])[None, :] < width[:, None]
    whole = twosample.Probabilities(n_a, n_b, xs, p_b, u_tol, kept, np.arange(rows))
    for t in (2.0, 3.3, 4.5, 5.9):
        total, edges = zoned(np.full(rows, t), np.arange(rows))
        part = np.arange(1, rows, 3)
        part_total, part_edges = zoned(np.full(len(part), t), part)
        np.testing.assert_allclose(part_total, total[part], rtol=1e-9)  # CDF or table
        np.testing.assert_array_equal(part_edges, edges[part])
        edge = twosample.boundary(n_a[:, None], n_b[:, None], np.full(rows, t), u_tol, xs)[1]
        np.testing.assert_allclose(total, whole(edge, table=True), rtol=1e-8, atol=1e-12)
        first, end = whole.first[:, None], (whole.first + whole.width)[:, None]
        np.testing.assert_array_equal(edges, np.clip(edge, first - 1, end))
