"""Detection's two-sample test: size at most α at every n, proven by enumeration of every table.

benchmarks/calibration.py runs the full proof (every n from 1 to 200, and n vs 10n); here a
seeded subset that still covers the smallest groups, where the asymptotic test failed.
"""

import numpy as np
import pytest
from scipy import stats

from biasaudit.tasks.rates import comparison_rates, comparison_reasons
from biasaudit.tasks.twosample import (
    exact_one_sided,
    rejection_probability,
    rejection_region,
    statistic,
    two_sample_test,
)

ALPHA = 0.05
RATES = np.concatenate([[0.001, 0.01], np.linspace(0.02, 0.98, 49), [0.99, 0.999]])


def enumerated_size(n_a, n_b, u_tol):
    """max over the rate grid of Σ pmf_A(x_A)·pmf_B(x_B) over the tables the test rejects, on
    H0's boundary |p_A − p_B| = U_tol; the rejecting tables found by calling the test itself."""
    x_a, x_b = np.meshgrid(np.arange(n_a + 1), np.arange(n_b + 1), indexing="ij")
    _, p, _ = two_sample_test(x_a, n_a, x_b, n_b, u_tol)
    reject = (p <= ALPHA).astype(float)
    worst = 0.0
    for p_b in RATES[RATES <= 1 - u_tol]:
        for p_a, q_b in ((p_b + u_tol, p_b), (p_b, p_b + u_tol)):
            pmf_a = stats.binom.pmf(np.arange(n_a + 1), n_a, p_a)
            pmf_b = stats.binom.pmf(np.arange(n_b + 1), n_b, q_b)
            worst = max(worst, float(pmf_a @ reject @ pmf_b))
    return worst


@pytest.mark.parametrize("u_tol", [0.0, 0.05])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 8, 10, 13, 17])
def test_size_at_most_alpha_by_enumeration_of_every_table(n, u_tol):
    """It rejects a true H0 with probability <= α at every rate of the grid, for two groups of n
    and for n against 4n (the Agresti-Caffo test reached 0.10 at n = 1 and 0.079 at n = 8)."""
    assert enumerated_size(n, n, u_tol) <= ALPHA + 1e-12
    assert enumerated_size(n, 4 * n, u_tol) <= ALPHA + 1e-12


@pytest.mark.parametrize("u_tol", [0.0, 0.05])
def test_size_at_most_alpha_up_to_200_from_the_rejection_region(u_tol):
    """It keeps the size <= α up to n = 200 (every n to 40, then steps), by the rejection region
    (tasks.twosample.rejection_region, checked against the test's own p-values above)."""
    for n in [*range(1, 41), 60, 90, 130, 200]:
        region = rejection_region(n, n, u_tol, ALPHA)
        p_b = RATES[RATES <= 1 - u_tol]
        size = max(
            rejection_probability(region, p_b + u_tol, p_b).max(),
            rejection_probability(region, p_b, p_b + u_tol).max(),
        )
        assert size <= ALPHA + 1e-12, n
    assert size > 0.8 * ALPHA / (2 if u_tol else 1)  # and it is not trivially conservative


@pytest.mark.parametrize(("n_a", "n_b"), [(7, 9), (20, 60), (15, 4)])
@pytest.mark.parametrize("u_tol", [0.0, 0.05])
def test_region_agrees_with_the_p_values(n_a, n_b, u_tol):
    """It rejects exactly the tables whose p-value is <= α (critical values vs p-values)."""
    x_a, x_b = np.meshgrid(np.arange(n_a + 1), np.arange(n_b + 1), indexing="ij")
    _, p, _ = two_sample_test(x_a, n_a, x_b, n_b, u_tol)
    assert ((p <= ALPHA) == rejection_region(n_a, n_b, u_tol, ALPHA)).all()


def test_one_sided_p_value_is_the_supremum_over_the_null():
    """Its one-sided p-value is the largest probability, over a fine grid of H0 (interior
    included), of a statistic at least as large as the observed one (independent brute force)."""
    n_a, n_b, x_a, x_b, u_tol = 9, 14, 7, 4, 0.05
    t = statistic(x_a, n_a, x_b, n_b, u_tol)
    tables = statistic(np.arange(n_a + 1)[:, None], n_a, np.arange(n_b + 1)[None, :], n_b, u_tol)
    extreme = (tables >= t - 1e-9).astype(float)
    best = 0.0
    for p_b in np.linspace(0, 1 - u_tol, 400):
        for p_a in np.linspace(0, p_b + u_tol, 8):  # H0: p_A − p_B <= U_tol
            pmf_a = stats.binom.pmf(np.arange(n_a + 1), n_a, p_a)
            pmf_b = stats.binom.pmf(np.arange(n_b + 1), n_b, p_b)
            best = max(best, float(pmf_a @ extreme @ pmf_b))
    assert exact_one_sided(x_a, n_a, x_b, n_b, u_tol) == pytest.approx(best, abs=2e-4)


def test_large_counts_use_the_normal_tail():
    """Above the exact limit the p-value is the normal one (no enumeration of millions)."""
    z, p, exact = two_sample_test(5200, 10_000, 5000, 10_000)
    assert not exact and p == pytest.approx(2 * stats.norm.sf(z), rel=1e-12)


def pairs_of(groups, reference_name=None):
    import pandas as pd

    rows = []
    for name, cells in groups.items():
        rows.append({"attribute": "sex", "group_name": name, "reference": "rest", **cells})
    frame = pd.DataFrame(rows)
    total = frame[["tp", "fp", "fn", "tn"]].sum()
    reference = [total - frame.loc[i, ["tp", "fp", "fn", "tn"]] for i in frame.index]
    if reference_name:
        ref = frame[frame["group_name"] == reference_name].iloc[0]
        for i in frame.index[frame["group_name"] != reference_name]:
            rows.append({**frame.loc[i].to_dict(), "reference": reference_name})
            reference.append(ref[["tp", "fp", "fn", "tn"]])
    return pd.DataFrame(rows), pd.DataFrame(reference).reset_index(drop=True)


@pytest.mark.parametrize("named", [None, "M"])
def test_two_valued_attribute_is_tested_once(named):
    """It tests 'F vs rest', 'M vs rest' and 'F vs M' once: one row without a reason, the others
    saying which comparison they repeat (so BH counts the hypothesis once)."""
    cells = {
        "F": {"tp": 30, "fp": 10, "fn": 5, "tn": 55},
        "M": {"tp": 20, "fp": 20, "fn": 10, "tn": 50},
    }
    group, reference = pairs_of(cells, named)
    reasons = comparison_reasons(group, reference)
    assert sum(r is None for r in reasons) == 1
    kept = group[[r is None for r in reasons]].iloc[0]
    assert (kept["group_name"], kept["reference"]) == (("F", "M") if named else ("F", "rest"))
    assert all("two-valued attribute" in r for r in reasons if r is not None)
    rates = comparison_rates(group, reference, ["tpr", "ppr"])
    assert rates["reason"].isna().sum() == 2  # one comparison x two metrics


def test_min_group_size_leaves_small_groups_untested():
    """It names the group size and the threshold for groups below min_group_size."""
    cells = {
        "a": {"tp": 3, "fp": 1, "fn": 1, "tn": 4},
        "b": {"tp": 30, "fp": 10, "fn": 5, "tn": 55},
        "c": {"tp": 20, "fp": 20, "fn": 10, "tn": 50},
    }
    group, reference = pairs_of(cells)
    reasons = comparison_reasons(group, reference, min_group_size=30)
    assert reasons[0] == "group size 9 < min_group_size 30"
    assert reasons[1] is None and reasons[2] is None


@pytest.mark.parametrize(
    ("n_a", "n_b"), [(5, 40), (40, 5), (37, 37), (150, 900), (900, 150), (400, 4000), (12_000, 999)]
)
@pytest.mark.parametrize("u_tol", [0.0, 0.05])
def test_grid_tail_table_equals_the_binomial_cdf(n_a, n_b, u_tol, monkeypatch):
    """The tails planning reads from one table per pair of sizes (cumulative sums of the pmf,
    only the counts near the mean kept at large n) equal scipy's binomial CDF and survival
    function (special.bdtr, bdtrc) at every region edge: within 1e-12 up to n = 1,000, within
    1e-9 beyond (the log-gamma of n carries the rounding); and the critical statistics and exact
    powers they give equal those computed with the CDF alone (no table)."""
    from biasaudit.tasks import twosample

    grid = twosample._grid(u_tol)
    tolerance = 1e-12 if max(n_a, n_b) <= 1000 else 1e-9
    for t in (0.5, 1.5, 2.5, 3.5):
        a_small, edge = twosample._boundary(n_a, n_b, t, u_tol)
        arguments = (n_a, n_b, a_small, edge, grid, u_tol)
        table = twosample._grid_tails(n_a, n_b, a_small, u_tol)
        assert table is not None
        from_table = twosample._region_probability(*arguments, tails=table)
        from_cdf = twosample._region_probability(*arguments)
        assert np.abs(from_table - from_cdf).max() < tolerance
    rates = (0.3 + u_tol, 0.25) if n_a < n_b else (0.25, 0.3 + u_tol)
    with_table = twosample.exact_power(n_a, n_b, *rates, u_tol, ALPHA)
    monkeypatch.setattr(twosample, "_TABLE_RATIO", 0)
    for cached in (twosample._grid_tails, twosample._refinement, twosample.critical_statistic):
        cached.cache_clear()
    assert twosample.exact_power(n_a, n_b, *rates, u_tol, ALPHA) == pytest.approx(
        with_table, abs=tolerance
    )
    for cached in (twosample._grid_tails, twosample._refinement, twosample.critical_statistic):
        cached.cache_clear()


@pytest.mark.parametrize(("n_a", "n_b"), [(1, 1), (3, 17), (17, 3), (25, 25), (8, 60), (60, 8)])
@pytest.mark.parametrize("u_tol", [0.0, 0.05, 0.2])
def test_region_edges_are_those_of_every_table(n_a, n_b, u_tol):
    """The region {T >= t} that _boundary describes (one edge per count of the smaller group,
    from the quadratic's root moved against T) is exactly the set of tables whose statistic is
    at least t, found by computing T for every table, at statistics from 1e-4 to 30."""
    from biasaudit.tasks import twosample

    x_a, x_b = np.meshgrid(np.arange(n_a + 1), np.arange(n_b + 1), indexing="ij")
    table = statistic(x_a, n_a, x_b, n_b, u_tol)
    for t in (1e-4, 0.3, 1.0, 1.96, 2.8, 4.0, 30.0):
        a_small, edge = twosample._boundary(n_a, n_b, t, u_tol)
        region = table >= t - twosample._TIE * (1 + t)
        if a_small:  # {x_B <= edge[x_A]}
            described = x_b <= edge[:, None]
        else:  # {x_A >= edge[x_B]}
            described = x_a >= edge[None, :]
        assert np.array_equal(described, region), (t, a_small, edge)


def test_region_edges_take_few_evaluations_even_at_a_tie(monkeypatch):
    """At a table tying the tolerance exactly (T ~ 1e-16: adjusted rates 0.20 and 0.15, U_tol
    0.05) and with U_tol near 1 (no real root), the edges are bisected (about log2 of the
    larger group's counts evaluations of T), never walked count by count (a million steps)."""
    from biasaudit.tasks import twosample

    calls = {"n": 0}
    original = twosample.statistic

    def counted(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(twosample, "statistic", counted)
    tie = float(original(3, 18, 149_999, 999_998, 0.05))
    assert 0 < tie < 1e-12
    for n_a, n_b, t, u_tol in [(18, 999_998, tie, 0.05), (164_826, 988, 710.4, 0.999)]:
        calls["n"] = 0
        twosample._boundary(n_a, n_b, t, u_tol)
        assert calls["n"] <= 2 * twosample._WALK + 2 * np.log2(max(n_a, n_b)) + 4
