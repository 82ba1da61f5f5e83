"""Planning: the papers' sample sizes, statsmodels' power solvers and simulated variances."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from biasaudit.tasks.planning import (
    achieved_power,
    allocation_sample_size,
    arcsine_sample_size,
    chi_square_sample_size,
    group_variance,
    neyman_sample_size,
    variance_from_counts,
)

# Tables 2 and 3 of the bias-measure paper: (e1, e2, N), reproduced by rounding up.
TABLES_2_AND_3 = [
    (0.20, 0.30, 319),
    (0.10, 0.20, 213),
    (0.00, 0.10, 42),
    (0.20, 0.40, 88),
    (0.05, 0.10, 463),
]
# Its face-recognition table 1: TPRs (%) of female and male, and N; reproduced by rounding to nearest.
FACES = [
    (65.00, 79.78, 154),
    (81.56, 94.44, 101),
    (81.56, 93.11, 135),
    (81.22, 93.00, 131),
    (90.00, 96.78, 214),
    (85.56, 86.78, 13708),
    (91.00, 94.22, 1118),
    (91.56, 94.11, 1739),
    (93.44, 93.78, 88612),
    (98.00, 97.67, 33266),
    (86.78, 90.78, 1058),
    (96.00, 96.11, 536364),
    (94.56, 95.56, 8023),
    (94.89, 93.67, 6189),
    (98.56, 97.22, 1920),
    (76.67, 86.22, 279),
    (89.44, 96.56, 205),
    (90.11, 97.11, 193),
    (92.67, 95.78, 946),
    (95.78, 98.78, 462),
]


@pytest.mark.parametrize(("e1", "e2", "printed"), TABLES_2_AND_3)
def test_tables_2_and_3_round_up(e1, e2, printed):
    """It reproduces tables 2 and 3 exactly when N is rounded up."""
    assert np.ceil(arcsine_sample_size(e1, e2)) == printed


@pytest.mark.parametrize(("female", "male", "printed"), FACES)
def test_face_recognition_table_1_rounds_to_nearest(female, male, printed):
    """It reproduces table 1 (error = 1 − TPR) within 1 when N is rounded to the nearest integer."""
    n = arcsine_sample_size(1 - female / 100, 1 - male / 100)
    assert abs(np.round(n) - printed) <= 1


def test_arcsine_matches_statsmodels_on_a_grid():
    """It equals NormalIndPower with Cohen's h, ratio 1, alternative 'larger' (and two-sided)."""
    from statsmodels.stats.power import NormalIndPower
    from statsmodels.stats.proportion import proportion_effectsize

    solver = NormalIndPower()
    for e1 in (0.01, 0.1, 0.3, 0.5, 0.8):
        for e2 in (0.02, 0.15, 0.35, 0.6, 0.95):
            h = abs(proportion_effectsize(e1, e2))
            one = solver.solve_power(
                effect_size=h, alpha=0.05, power=0.9, ratio=1, alternative="larger"
            )
            two = solver.solve_power(
                effect_size=h, alpha=0.05, power=0.9, ratio=1, alternative="two-sided"
            )
            assert arcsine_sample_size(e1, e2) == pytest.approx(one, rel=1e-6)
            assert arcsine_sample_size(e1, e2, alternative="two-sided") == pytest.approx(
                two, rel=1e-3
            )


def test_arcsine_edge_cases_and_vectorised():
    """It is infinite at e1 = e2, vectorised, and rejects an unknown alternative."""
    assert np.isinf(arcsine_sample_size(0.2, 0.2))
    assert arcsine_sample_size([0.2, 0.1], [0.3, 0.2]).shape == (2,)
    with pytest.raises(ValueError):
        arcsine_sample_size(0.1, 0.2, alternative="sideways")


def test_audit_tutorial_demographic_parity_example():
    """It gives n within 1% of 855 for the tutorial's appendix A inputs."""
    plan = neyman_sample_size(0.227, 0.246, tau=0.093, u_tol=0.0, level=0.05, power=0.8)
    assert plan.n == pytest.approx(855, rel=0.01)
    assert plan.p1 == pytest.approx(np.sqrt(0.227) / (np.sqrt(0.227) + np.sqrt(0.246)))


def test_neyman_is_the_smallest_allocation():
    """It needs no more predictions than any other split, and equal split needs more when σ differ."""
    neyman = neyman_sample_size(0.05, 0.2, 0.05)
    shares = np.linspace(0.01, 0.99, 981)
    assert neyman.n <= allocation_sample_size(0.05, 0.2, 0.05, shares).n.min() + 1e-9
    assert allocation_sample_size(0.05, 0.2, 0.05, 0.5).n > neyman.n
    assert neyman.n1 + neyman.n2 == pytest.approx(neyman.n)
    assert np.isinf(allocation_sample_size(0.1, 0.1, 0.02, 0.5, u_tol=0.05).n)


CELL_PROBS = np.array([0.18, 0.07, 0.12, 0.63])  # tp, fp, fn, tn


@pytest.mark.parametrize("metric", ["ppr", "tpr", "fnr", "tnr", "fpr", "ppv", "npv", "acc"])
def test_variance_formulas_match_simulation(metric):
    """It predicts n·Var(M̂) of each group metric, by simulating 200,000 groups of 2,000."""
    tp, fp, fn, tn = CELL_PROBS
    prev, ppr = tp + fn, tp + fp
    formulas = {
        "ppr": (tp + fp, ppr),
        "acc": (tp + tn, 1),
        "tpr": (tp / prev, None),
        "fnr": (fn / prev, None),
        "tnr": (tn / (1 - prev), None),
        "fpr": (fp / (1 - prev), None),
        "ppv": (tp / ppr, None),
        "npv": (tn / (1 - ppr), None),
    }
    value = formulas[metric][0]
    predicted = group_variance(metric, value, prev=prev, ppr=ppr)
    n = 2000
    draws = np.random.default_rng(5).multinomial(n, CELL_PROBS, size=200_000).astype(float)
    t, f, m, u = draws.T
    estimate = {
        "ppr": (t + f) / n,
        "acc": (t + u) / n,
        "tpr": t / (t + m),
        "fnr": m / (t + m),
        "tnr": u / (f + u),
        "fpr": f / (f + u),
        "ppv": t / (t + f),
        "npv": u / (m + u),
    }[metric]
    assert n * estimate.var() == pytest.approx(predicted, rel=0.02)


def test_variance_from_counts_equals_the_table():
    """It gives the table's variance for each rate metric from numerator, denominator and n."""
    tp, fp, fn, tn = 180, 70, 120, 630
    n = tp + fp + fn + tn
    prev, ppr = (tp + fn) / n, (tp + fp) / n
    assert variance_from_counts(tp, tp + fn, n) == pytest.approx(
        group_variance("tpr", tp / (tp + fn), prev=prev)
    )
    assert variance_from_counts(tp, tp + fp, n) == pytest.approx(
        group_variance("ppv", tp / (tp + fp), ppr=ppr)
    )
    assert variance_from_counts(tn, tn + fn, n) == pytest.approx(
        group_variance("npv", tn / (tn + fn), ppr=ppr)
    )
    with pytest.raises(ValueError, match="needs prev"):
        group_variance("tpr", 0.5)


def test_chi_square_matches_statsmodels():
    """It agrees with statsmodels' chi-square goodness-of-fit power solver for k groups."""
    from statsmodels.stats.power import GofChisquarePower

    for rates in ([0.1, 0.2], [0.1, 0.15, 0.2, 0.3], [0.4, 0.45, 0.5]):
        rates = np.array(rates)
        w = np.sqrt(np.mean((rates - rates.mean()) ** 2) / (rates.mean() * (1 - rates.mean())))
        total = GofChisquarePower().solve_power(
            effect_size=w, alpha=0.05, power=0.9, n_bins=len(rates)
        )
        assert chi_square_sample_size(rates) == pytest.approx(total / len(rates), rel=1e-4)
    assert np.isinf(chi_square_sample_size([0.2, 0.2, 0.2]))


def test_k2_chi_square_is_the_two_sided_normal_formula():
    """It reduces, for two groups, to n = 2ē(1 − ē)(z_{1−α/2} + z_{1−β})²/Δ²."""
    e1, e2 = 0.2, 0.3
    mean = (e1 + e2) / 2
    normal = (
        2 * mean * (1 - mean) * (stats.norm.ppf(0.975) + stats.norm.ppf(0.9)) ** 2 / (e2 - e1) ** 2
    )
    assert chi_square_sample_size([e1, e2]) == pytest.approx(normal, rel=0.01)


def test_achieved_power_matches_simulated_rejections():
    """It predicts how often the audit test rejects with the groups at hand."""
    rng = np.random.default_rng(9)
    m1, m2, n1, n2, tau = 0.30, 0.36, 800, 500, 0.06
    x1, x2 = rng.binomial(n1, m1, 100_000), rng.binomial(n2, m2, 100_000)
    p1, p2 = x1 / n1, x2 / n2
    z = (p2 - p1) / np.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    simulated = (z > stats.norm.ppf(0.975)).mean()
    predicted = achieved_power(tau, m1 * (1 - m1), n1, m2 * (1 - m2), n2)
    assert predicted == pytest.approx(simulated, abs=0.01)


def comparison(group_cells, reference_cells, attribute="race", name="B"):
    import pandas as pd

    cells = ["tp", "fp", "fn", "tn"]
    group = pd.DataFrame([group_cells], columns=cells).assign(
        attribute=attribute, group_name=name, reference="rest"
    )
    return group, pd.DataFrame([reference_cells], columns=cells)


def test_plan_rows_follow_the_formulas():
    """It sizes each comparison with the tutorial's eq. 2 at detection's level α/m, with the
    configured τ beyond the tolerance and floored rates, in the direction that needs more data."""
    from biasaudit.tasks.planning import plan
    from biasaudit.tasks.rates import comparison_rates

    group, reference = comparison((60, 40, 20, 80), (300, 100, 100, 500))
    row = plan(
        comparison_rates(group, reference, ["fpr", "ppr"]),
        tau=0.1,
        alpha=0.05,
        power=0.8,
        tolerance=0.02,
    ).set_index("metric")
    level = 0.05 / 2  # two tests in the family
    fpr_r = (100 + 0.5) / (600 + 1)  # floored reference rate
    z = stats.norm.ppf(1 - level / 2) + stats.norm.ppf(0.8)
    needed = []
    for fpr_g in (fpr_r + 0.1, fpr_r - 0.1):
        var_g = fpr_g * (1 - fpr_g) * 200 / 120  # per observation: M(1 − M)·n/d
        var_r = fpr_r * (1 - fpr_r) * 1000 / 600
        needed.append(z**2 * (var_r / (1000 / 1200) + var_g / (200 / 1200)) / (0.1 - 0.02) ** 2)
    assert row.loc["fpr", "needed"] == pytest.approx(max(needed))
    assert row.loc["fpr", "level"] == pytest.approx(level)
    assert row.loc["fpr", "difference"] == pytest.approx(40 / 120 - 100 / 600)
    assert row.loc["fpr", "bias_n"] == pytest.approx(
        arcsine_sample_size(100 / 600, 40 / 120, 0.05, 0.8)
    )
    assert row.loc["fpr", "ratio"] == pytest.approx((40 / 120) / (100 / 600))
    assert row.loc["fpr", "power_method"] == "exact"  # 120 x 600 tables: enumerated
    with pytest.raises(ValueError):
        plan(comparison_rates(group, reference, ["fpr"]), tau=None, alpha=0.05, power=0.8)
    with pytest.raises(ValueError):
        plan(
            comparison_rates(group, reference, ["fpr"]),
            tau=0.02,
            alpha=0.05,
            power=0.8,
            tolerance=0.05,
        )


@pytest.mark.parametrize("cells", [(1, 0, 0, 0), (2, 0, 0, 0), (1, 1, 0, 0), (0, 0, 0, 2)])
def test_groups_of_one_or_two_are_never_enough_data(cells):
    """It never calls a group of one or two predictions 'enough data', even at a rate of 0 or 1
    (the plug-in variance 0 gave 'power 1')."""
    from biasaudit.tasks.planning import plan
    from biasaudit.tasks.rates import comparison_rates

    group, reference = comparison(cells, (300, 100, 100, 500))
    rows = plan(
        comparison_rates(group, reference, ["tpr", "fpr", "ppr", "acc"]),
        tau=0.1,
        alpha=0.05,
        power=0.8,
    )
    tested = rows[rows["reason"].isna()]
    assert len(tested) and (tested["achieved_power"] < 0.2).all()
    assert not (rows["verdict"] == "enough data").any()


def simulated_power(d_g, d_r, p_g, p_r, tolerance, level, rng, sims=600):
    """Share of simulated audits in which detection's own test (unfairness_test) rejects."""
    from biasaudit.tasks.detection import unfairness_test

    x_g, x_r = rng.binomial(d_g, p_g, sims), rng.binomial(d_r, p_r, sims)
    tables, counts = np.unique(np.stack([x_g, x_r]), axis=1, return_counts=True)
    p = np.concatenate(  # 100 tables at a time: a table of millions holds ~8 MB of tails
        [
            unfairness_test(tables[0, at], d_g, tables[1, at], d_r, tolerance)[1]
            for at in np.array_split(np.arange(tables.shape[1]), -(-tables.shape[1] // 100))
        ]
    )
    return float(((p <= level) * counts).sum() / sims)


@pytest.mark.parametrize(
    ("d_g", "d_r", "gap"),
    [(8, 400, 0.3), (30, 600, 0.2), (60, 300, 0.15), (400, 4000, 0.05), (1200, 3000, 0.06)],
)
@pytest.mark.parametrize("tolerance", [0.0, 0.05])
def test_reported_power_matches_monte_carlo_of_detection(d_g, d_r, gap, tolerance):
    """Planning's power equals the rejection rate of detection's test (unfairness_test, called
    on simulated tables) within ±0.05, at the same level, tolerance and true gap."""
    from biasaudit.tasks.planning import detection_power

    rng = np.random.default_rng(d_g + d_r)
    p_r, level = 0.3, 0.01
    p_g = p_r + gap + tolerance
    reported, _ = detection_power(p_g, d_g, p_r, d_r, tolerance, level)
    simulated = simulated_power(d_g, d_r, p_g, p_r, tolerance, level, rng)
    assert float(reported) == pytest.approx(simulated, abs=0.05)


# The paper's table 1 ranks (D↓, R↓, N↑) per race, for algorithms 1-5.
PAPER_RANKS = {
    "Asian": ([5, 4, 2, 3, 1], [1, 5, 2, 3, 4], [2, 5, 3, 4, 1]),
    "Black": ([3, 5, 4, 2, 1], [2, 5, 4, 1, 3], [3, 5, 4, 1, 2]),
    "Indian": ([5, 1, 2, 3, 4], [4, 1, 2, 3, 5], [5, 1, 2, 3, 4]),
    "White": ([5, 4, 3, 2, 1], [1, 3, 4, 2, 5], [3, 4, 5, 1, 2]),
}


@pytest.mark.parametrize("race", list(PAPER_RANKS))
def test_rank_bias_reproduces_table_1_rankings(race):
    """It ranks the five face-recognition algorithms as the paper's table 1 does, by D, R and N."""
    import pandas as pd

    from biasaudit.tasks.planning import rank_bias

    offset = list(PAPER_RANKS).index(race) * 5
    rows = FACES[offset : offset + 5]
    table = pd.DataFrame(
        {
            "model": [f"alg.{i}" for i in range(1, 6)],
            "value_reference": [1 - f / 100 for f, _, _ in rows],
            "value_group": [1 - m / 100 for _, m, _ in rows],
        }
    )
    ranked = rank_bias(table)
    by_d, by_r, by_n = PAPER_RANKS[race]
    assert ranked["rank_difference"].tolist() == by_d
    assert ranked["rank_ratio"].tolist() == by_r
    assert ranked["rank_bias_n"].tolist() == by_n
    assert ranked["disagree"].any()


def test_the_suites_remembered_powers_are_the_computed_ones():
    """tests/conftest.py has planning remember its exact powers per arguments: a second call gives
    what tasks.twosample_power computes, untouched by a caller that changed the first result."""
    from biasaudit.tasks import planning, twosample_power

    args = ([30.0, 200.0], [400.0, 900.0], [0.5, 0.4], [0.3, 0.3], 0.05, 0.01)
    planning.exact_powers(*args, null_sides=False)[:] = -1.0
    again = planning.exact_powers(*args, null_sides=False)
    assert np.array_equal(again, twosample_power.exact_powers(*args, null_sides=False))
    assert planning.exact_powers is not twosample_power.exact_powers  # the suite's wrapper is in place


# Comparisons like the grid's of benchmarks/planning_accuracy.py whose skewness term is at most
# NORMAL_SKEW: (group, reference, group's rate, reference's rate, tolerance, level).
NORMAL_CELLS = [
    (1e6, 1e6, 0.30127, 0.3, 0.0, 0.05),
    (1e6, 1e7, 0.25138, 0.2, 0.05, 1e-3),
    (1e7, 1e7, 0.49891, 0.5, 0.0, 1e-6),
    (1e6, 1e8, 0.70195, 0.5, 0.2, 1e-3),
    (3e5, 3e6, 0.50188, 0.5, 0.0, 0.05),
]


@pytest.mark.parametrize("cell", NORMAL_CELLS)
def test_auto_takes_the_normal_limit_only_where_it_is_proven(cell):
    """'auto' reports the normal limit where the skewness term is at most NORMAL_SKEW, within
    0.005 of the exact power of the same test (tasks.twosample_power, itself checked against the
    enumeration of every table), and the exact power everywhere else; 'exact' never the limit."""
    from biasaudit.tasks.planning import OUTSIDE, PRECISION, detection_power
    from biasaudit.tasks.twosample_power import NORMAL_SKEW, exact_powers, skewness_term

    n_g, n_r, p_g, p_r, u, level = cell
    assert skewness_term(n_g, n_r, p_g, p_r, u, level) <= NORMAL_SKEW
    auto, method = detection_power(p_g, n_g, p_r, n_r, u, level)
    exact = exact_powers(
        n_g, n_r, p_g, p_r, u, level, null_sides=False, precision=PRECISION, outside=OUTSIDE
    )
    assert method == "limit" and 0.1 < float(exact) < 0.95
    assert float(auto) == pytest.approx(float(exact), abs=0.005)
    forced, method = detection_power(p_g, n_g, p_r, n_r, u, level, "exact")
    assert method == "exact" and float(forced) == float(exact)
    # a hundred times fewer predictions: outside the proof, the exact power
    _, method = detection_power(p_g, n_g / 100, p_r, n_r / 100, u, level)
    assert method == "exact"


def test_planning_power_setting_reaches_the_planning_rows():
    """Thresholds.planning_power: 'auto' stores power_method 'limit' for a comparison of
    millions (the skewness term below NORMAL_SKEW), 'exact' stores 'exact' for every row, and
    the two powers agree within 0.005."""
    from biasaudit.schemas.config import audit_from_options
    from biasaudit.tasks.core import audit_counts
    from biasaudit.tasks.counts import group_counts

    cells = pd.DataFrame(
        {
            "g": ["a", "a", "a", "a", "b", "b", "b", "b"],
            "y_true": [1.0, 1.0, 0.0, 0.0] * 2,
            "y_pred": [1, 0, 1, 0] * 2,
            "n": [2_000_000, 2_000_000, 1_000_000, 5_000_000] + [1_900_000, 2_100_000, 900_000, 5_100_000],
        }
    )
    counts = group_counts(cells, ["g"], [])
    rows = {}
    for method in ("auto", "exact"):
        audit = audit_from_options(
            attributes=["g"], metrics=["ppr", "tpr"], bootstrap_replicates=100,
            planning_power=method,
        )
        planning = audit_counts(counts, audit).planning
        rows[method] = planning[planning["reason"].isna()].set_index(["group_name", "metric"])
    assert set(rows["exact"]["power_method"]) == {"exact"}
    assert "limit" in set(rows["auto"]["power_method"])
    assert np.allclose(rows["auto"]["achieved_power"], rows["exact"]["achieved_power"], atol=0.005)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("d_g", "d_r", "p_g", "method"),
    [(400, 4000, 0.42, "exact"), (1200, 3000, 0.39, "exact"), (300_000, 3_000_000, 0.30172, "limit")],
)
def test_reported_power_is_calibrated_within_002(d_g, d_r, p_g, method):
    """Planning's power, exact or from the normal limit, equals the rejection rate of detection's
    own test on 4,000 simulated audits within 0.02 (2.5 Monte Carlo standard errors at 0.5)."""
    from biasaudit.tasks.planning import detection_power

    p_r, tolerance, level = 0.3, 0.0 if method == "limit" else 0.05, 0.05
    reported, used = detection_power(p_g, d_g, p_r, d_r, tolerance, level)
    assert used == method
    rng = np.random.default_rng(d_g)
    simulated = simulated_power(d_g, d_r, p_g, p_r, tolerance, level, rng, sims=4000)
    assert float(reported) == pytest.approx(simulated, abs=0.02)
