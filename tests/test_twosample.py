"""Detection's two-sample test (Berger-Boos exact at every size): size at most α proven by
enumeration of every table at small n and by simulation at large, very unequal n; the p-value
against an independent brute force; planning's exact power against the test's own p-values.

benchmarks/calibration.py runs the longer proofs (every n from 1 to 200, and n vs 10n).
"""

import numpy as np
import pytest
from scipy import stats

from biasaudit.tasks.rates import comparison_rates, comparison_reasons
from biasaudit.tasks.twosample import GAMMA, exact_one_sided, statistic, two_sample_test
from biasaudit.tasks.twosample_power import (
    exact_power,
    exact_powers,
    normal_power,
    rejection_probability,
    rejection_region,
)

ALPHA = 0.05
BOUNDARY = np.linspace(0.0, 1.0, 201)  # true rates p_B on H0's boundary p_A = p_B ± U_tol


def enumerated_size(n_a, n_b, u_tol, alpha=ALPHA):
    """max over the fine rate grid of Σ pmf_A(x_A)·pmf_B(x_B) over the tables the test rejects,
    on H0's boundary |p_A − p_B| = U_tol; the rejecting tables found by calling the test itself
    on every table (a finite sum: the exact size at each rate)."""
    x_a, x_b = np.meshgrid(np.arange(n_a + 1), np.arange(n_b + 1), indexing="ij")
    _, p, _ = two_sample_test(x_a, n_a, x_b, n_b, u_tol)
    reject = (p <= alpha).astype(float)
    worst = 0.0
    for p_b in BOUNDARY[1 - u_tol >= BOUNDARY]:
        for p_a, q_b in ((p_b + u_tol, p_b), (p_b, p_b + u_tol)):
            pmf_a = stats.binom.pmf(np.arange(n_a + 1), n_a, p_a)
            pmf_b = stats.binom.pmf(np.arange(n_b + 1), n_b, q_b)
            worst = max(worst, float(pmf_a @ reject @ pmf_b))
    return worst


@pytest.mark.parametrize("u_tol", [0.0, 0.05, 0.2])
@pytest.mark.parametrize(
    ("n_a", "n_b"),
    [
        (1, 1),
        (2, 2),
        (3, 3),
        (5, 5),
        (8, 8),
        (13, 13),
        (17, 17),
        (2, 8),
        (5, 20),
        (13, 52),
        (1, 40),
        (3, 90),
        (8, 160),
        (150, 4),
    ],
)
def test_size_at_most_alpha_by_enumeration_of_every_table(n_a, n_b, u_tol):
    """It rejects a true H0 with probability <= α at every rate of a 201-point grid of H0's
    boundary, for equal groups, n against 4n and very unequal groups (1 vs 40 ... 8 vs 160; the
    Agresti-Caffo z-test reached 0.10 at n = 1 and 0.079 at n = 8)."""
    assert enumerated_size(n_a, n_b, u_tol) <= ALPHA + 1e-12


@pytest.mark.parametrize("u_tol", [0.0, 0.05])
def test_size_at_most_alpha_up_to_200_from_the_exact_power(u_tol):
    """It keeps the size <= α up to n = 200 and for n against 10n: the size is exact_power at
    H0's boundary, which equals the enumeration of the p-values' rejection region (next test)."""
    rates = np.linspace(0.02, 0.98 - u_tol, 13)
    worst = 0.0
    for n_a, n_b in [(25, 25), (40, 400), (60, 60), (130, 130), (200, 200), (200, 20)]:
        for p_b in rates:
            for p_a, q_b in ((p_b + u_tol, p_b), (p_b, p_b + u_tol)):
                size = exact_power(n_a, n_b, p_a, q_b, u_tol, ALPHA)
                assert size <= ALPHA + 1e-12, (n_a, n_b, p_b)
                worst = max(worst, size)
    assert worst > 0.5 * ALPHA / (2 if u_tol else 1)  # and it is not trivially conservative


@pytest.mark.parametrize(("n_a", "n_b"), [(7, 9), (12, 30), (15, 4), (3, 40), (25, 25)])
@pytest.mark.parametrize("u_tol", [0.0, 0.05, 0.2])
def test_exact_power_is_the_sum_over_the_p_values_region(n_a, n_b, u_tol):
    """Planning's exact power (critical statistics per nuisance value, the tables between them
    decided one by one) equals the binomial sum over the tables whose p-value is <= the level;
    without the sides whose null holds at the true rates, it is at most level/2 below."""
    for level in (0.05, 0.003):
        region = rejection_region(n_a, n_b, u_tol, level)
        for p_a, p_b in [(0.5, 0.2), (0.3, 0.25 + u_tol), (0.9, 0.5), (0.1, 0.6), (0.02, 0.3)]:
            expected = rejection_probability(region, p_a, p_b)[0]
            assert exact_power(n_a, n_b, p_a, p_b, u_tol, level) == pytest.approx(
                expected, abs=1e-12
            )
            side = exact_power(n_a, n_b, p_a, p_b, u_tol, level, null_sides=False)
            assert expected - level / 2 - 1e-12 <= side <= expected + 1e-12


def test_counts_left_out_only_lower_the_power():
    """exact_powers(outside=q) leaves out each group's counts beyond its binomial quantiles at q
    and 1 − q: the power is never above the enumeration's, and at most 4q below it (a table
    beyond the kept counts has its interval outside the nuisance values searched, so counting it
    as rejecting could overstate the power: 25 vs 3 at tolerance 0.3 did, 5.1e-6 where the
    enumeration gives 0)."""
    rng = np.random.default_rng(1)
    enumerated = rejection_probability(rejection_region(25, 3, 0.3, 0.05), 0.639, 0.279)[0]
    assert enumerated == 0.0
    assert exact_powers(25, 3, 0.639, 0.279, 0.3, 0.05, outside=0.2) == enumerated
    regions: dict[tuple, np.ndarray] = {}
    for _ in range(60):
        n_a, n_b = (int(v) for v in rng.integers(1, 30, 2))
        u_tol, level = float(rng.choice([0.0, 0.05, 0.3])), float(rng.choice([0.05, 0.01]))
        key = (n_a, n_b, u_tol, level)
        region = regions.setdefault(key, rejection_region(*key))
        p_a, p_b = rng.uniform(0.01, 0.99, 2)
        expected = rejection_probability(region, p_a, p_b)[0]
        for outside in (0.05, 0.3):
            got = exact_powers(n_a, n_b, p_a, p_b, u_tol, level, outside=outside)
            assert expected - 4 * outside - 1e-12 <= got <= expected + 1e-10, (key, p_a, p_b)


def clopper_pearson_brute(x, n, confidence):
    """Clopper-Pearson by its definition: the rates at which each tail of the observed count is
    (1 − confidence)/2, found by bisection on scipy's binomial CDF."""

    def solve(function, target):
        low, high = 0.0, 1.0
        for _ in range(200):
            mid = (low + high) / 2
            low, high = (mid, high) if function(mid) > target else (low, mid)
        return (low + high) / 2

    tail = (1 - confidence) / 2
    lower = 0.0 if x == 0 else 1 - solve(lambda q: stats.binom.sf(x - 1, n, 1 - q), tail)
    upper = 1.0 if x == n else solve(lambda p: stats.binom.cdf(x, n, p), tail)
    return lower, upper


def berger_boos_brute(x_a, n_a, x_b, n_b, u_tol, gamma):
    """γ + max over a dense grid of (p_A, p_B) in the rectangle of the two groups' intervals
    (each of confidence √(1 − γ)) within H0 (p_A − p_B <= U_tol), interior included, of
    P(T >= t_obs) over every table (plain loops): the definition, no monotonicity used."""
    t_obs = statistic(x_a, n_a, x_b, n_b, u_tol)
    if t_obs <= 0:
        return 1.0
    extreme = np.zeros((n_a + 1, n_b + 1))
    for i in range(n_a + 1):
        for j in range(n_b + 1):
            extreme[i, j] = statistic(i, n_a, j, n_b, u_tol) >= t_obs - 1e-9 * (1 + t_obs)
    a_low, a_high = clopper_pearson_brute(x_a, n_a, np.sqrt(1 - gamma))
    b_low, b_high = clopper_pearson_brute(x_b, n_b, np.sqrt(1 - gamma))
    best = 0.0
    for p_b in np.linspace(b_low, b_high, 601):
        top = min(a_high, p_b + u_tol)  # H0 within the rectangle
        if top < a_low:
            continue
        pmf_b = stats.binom.pmf(np.arange(n_b + 1), n_b, p_b)
        for p_a in np.linspace(a_low, top, 12):
            pmf_a = stats.binom.pmf(np.arange(n_a + 1), n_a, p_a)
            best = max(best, float(pmf_a @ extreme @ pmf_b))
    return min(1.0, gamma + best)


@pytest.mark.parametrize(
    ("x_a", "n_a", "x_b", "n_b", "u_tol", "gamma"),
    [
        (7, 9, 4, 14, 0.05, GAMMA),  # the intervals cover nearly all of H0
        (7, 9, 4, 14, 0.05, 0.02),
        (12, 20, 3, 18, 0.0, 0.01),
        (5, 6, 10, 30, 0.1, 0.05),
        (20, 25, 4, 22, 0.05, 0.05),  # the rectangle lies in H1: p = γ
        (3, 12, 1, 40, 0.0, 0.001),
        (9, 30, 2, 35, 0.05, 1e-4),
        (40, 60, 30, 70, 0.0, 0.001),
    ],
)
def test_one_sided_p_value_is_berger_boos_by_brute_force(x_a, n_a, x_b, n_b, u_tol, gamma):
    """Its one-sided p-value is γ plus the largest probability, over the confidence rectangle
    within H0 (interior included), of a statistic at least as large as the observed one, by an
    independent brute force (intervals from the binomial CDF, every table, a dense grid): never
    below it by more than 1e-5 (the nuisance grid's resolution), above it by at most 5e-4 (the
    grid values just outside the interval's ends are evaluated too: conservative)."""
    expected = berger_boos_brute(x_a, n_a, x_b, n_b, u_tol, gamma)
    p = exact_one_sided(x_a, n_a, x_b, n_b, u_tol, gamma)
    assert expected - 1e-5 <= p <= expected + 5e-4


def test_monte_carlo_size_at_large_and_very_unequal_n():
    """At 375 vs 45,000 on H0's boundary U = ±0.05, simulated tables are rejected at most at
    α/2 (one side is at its boundary, the other far inside its null), and at 3,000 vs 30,000 with
    equal rates at most at α (3,000 tables each, within three standard errors)."""
    rng = np.random.default_rng(11)
    sims = 3000
    cases = [(375, 45_000, 0.70, 0.05, 1), (375, 45_000, 0.70, 0.05, -1), (3000, 30_000, 0.3, 0, 1)]
    for n_g, n_r, p_r, u_tol, sign in cases:
        x_g, x_r = rng.binomial(n_g, p_r + sign * u_tol, sims), rng.binomial(n_r, p_r, sims)
        _, p, _ = two_sample_test(x_g, n_g, x_r, n_r, u_tol)
        size = ALPHA / 2 if u_tol else ALPHA
        assert (p <= ALPHA).mean() <= size + 3 * np.sqrt(size * (1 - size) / sims), (n_g, sign)


def test_power_rises_with_the_reference_and_matches_simulation():
    """A group of 375 (TPR 0.55) against a reference at 0.70, tolerance 0.05, level 0.0007: the
    power rises with the reference (1,125 / 4,500 / 45,000 positives; the whole-range supremum
    gave 0.44 / 0.38 / 0.03) and is at least 0.6 at 45,000, near the normal-theory power; and
    the simulated rejection rate of the test agrees with it (400 audits, ±0.075)."""
    powers = [exact_power(375, n_r, 0.55, 0.70, 0.05, 0.0007) for n_r in (1125, 4500, 45_000)]
    assert powers[0] < powers[1] < powers[2] and powers[2] >= 0.6
    normal = normal_power(0.55, 375, 0.70, 45_000, 0.05, 0.0007)
    assert powers[2] == pytest.approx(float(normal), abs=0.05)
    rng = np.random.default_rng(5)
    x_g, x_r = rng.binomial(375, 0.55, 400), rng.binomial(45_000, 0.70, 400)
    _, p, _ = two_sample_test(x_g, 375, x_r, 45_000, 0.05)
    assert (p <= 0.0007).mean() == pytest.approx(powers[2], abs=0.075)


def test_no_jump_at_a_thousand():
    """One test at every size: the p-values of 1,000 and 1,001 positives at the same rates
    (6.7e-5, 7.5e-5: as the one more count moves the rate), and planning's power there, differ only
    as the counts do (the old switch from the exact to the normal test above 1,000 moved this
    p-value 1.5e-4 -> 8.0e-5, and planning's power 0.675 -> 0.718)."""
    from biasaudit.tasks.planning import detection_power

    _, p, _ = two_sample_test([580, 581], [1000, 1001], [2135, 2135], [3050, 3050], 0.05)
    assert p[0] == pytest.approx(p[1], rel=0.15)
    power, method = detection_power(0.58, [1000, 1001], 0.70, 3050, 0.05, 0.0007)
    assert abs(power[1] - power[0]) < 0.005 and method[0] == method[1]


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
def test_tail_table_equals_the_binomial_cdf(n_a, n_b, u_tol):
    """The larger group's tails read from one table per nuisance value (cumulative sums of the
    pmf, only the counts near the mean kept at large n) equal scipy's binomial CDF and survival
    function (special.bdtr, bdtrc, where few edges fall within 5√n of the larger group's mean)
    at every region edge: within 1e-12 up to n = 1,000, within 1e-9 beyond (the log-gamma of n
    carries the rounding)."""
    from biasaudit.tasks import twosample

    p_b = np.linspace(0.0, 1.0 - u_tol, 65)
    xs = np.arange(min(n_a, n_b) + 1, dtype="float64")
    tolerance = 1e-12 if max(n_a, n_b) <= 1000 else 1e-9
    for t in (0.5, 1.5, 2.5, 3.5):
        _, edge = twosample.boundary(n_a, n_b, t, u_tol, xs)
        probabilities = twosample.Probabilities(n_a, n_b, xs, p_b, u_tol)
        from_cdf = probabilities(edge, table=False)
        assert np.abs(probabilities(edge, table=True) - from_cdf).max() < tolerance
        assert np.array_equal(probabilities(edge), probabilities(edge, table=True))


@pytest.mark.parametrize(("n_a", "n_b"), [(1, 1), (3, 17), (17, 3), (25, 25), (8, 60), (60, 8)])
@pytest.mark.parametrize("u_tol", [0.0, 0.05, 0.2])
def test_region_edges_are_those_of_every_table(n_a, n_b, u_tol):
    """The region {T >= t} that boundary describes (one edge per count of the smaller group,
    from the quadratic's root moved against T) is exactly the set of tables whose statistic is
    at least t, found by computing T for every table, at statistics from 1e-4 to 30 (one at a
    time and all at once)."""
    from biasaudit.tasks import twosample

    x_a, x_b = np.meshgrid(np.arange(n_a + 1), np.arange(n_b + 1), indexing="ij")
    table = statistic(x_a, n_a, x_b, n_b, u_tol)
    ts = (1e-4, 0.3, 1.0, 1.96, 2.8, 4.0, 30.0)
    _, together = twosample.boundary(n_a, n_b, np.array(ts), u_tol)
    for t, row in zip(ts, together):
        a_small, edge = twosample.boundary(n_a, n_b, t, u_tol)
        assert np.array_equal(edge, row)
        region = table >= t - twosample.TIE * (1 + t)
        # {x_B <= edge[x_A]} where A is the smaller side, else {x_A >= edge[x_B]}
        described = x_b <= edge[:, None] if a_small else x_a >= edge[None, :]
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
        twosample.boundary(n_a, n_b, t, u_tol)
        assert calls["n"] <= 2 * twosample._WALK + 2 * np.log2(max(n_a, n_b)) + 4
