"""MATCH test: exact forms against Monte Carlo, approximations within their error bounds."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from biasaudit.schemas.metric_ids import BINOMIAL_CELLS, JOINT_RATIO_CELLS, MATCH_METRICS
from biasaudit.tasks.match import match_test

CELLS = ["tp", "fp", "fn", "tn"]


def frame(*rows):
    return pd.DataFrame(rows, columns=CELLS)


def test_paper_example_binomial():
    """It reproduces the paper's example: n = 100, p = 0.75, observed 0.80 -> about 0.90."""
    group = frame((70, 10, 10, 10))  # ACC = 0.80
    reference = frame((60, 15, 10, 15))  # ACC = 0.75
    row = match_test(group, reference, ["acc"], min_reference_ratio=0).iloc[0]
    assert row["percentile_approx"] == pytest.approx(0.90, abs=0.005)
    assert row["percentile"] == pytest.approx(stats.binom.cdf(80, 100, 0.75), abs=1e-12)


def test_spec_marginal_benefit_example():
    """It gives the MB example's numbers (n = 50, p_FP = 0.2, p_FN = 0.1): exact 0.8819, normal
    with continuity correction 0.8813."""
    group = frame((20, 12, 3, 15))  # n = 50, FP = 12, FN = 3
    reference = frame((35, 20, 10, 35))  # p_FP = 0.2, p_FN = 0.1
    row = match_test(group, reference, ["mb"], min_reference_ratio=0).iloc[0]
    assert row["percentile"] == pytest.approx(0.8819, abs=5e-5)
    assert row["percentile_approx"] == pytest.approx(0.8813, abs=5e-5)


def simulated_percentiles(group_cells, reference_p, metric, draws=400_000, seed=0):
    """P(M <= m_obs) and P(M >= m_obs) by drawing the group's n predictions from the reference."""
    rng = np.random.default_rng(seed)
    n = sum(group_cells)
    sample = rng.multinomial(n, reference_p, size=draws)
    idx = {c: i for i, c in enumerate(CELLS)}
    g = dict(zip(CELLS, group_cells))
    if metric in BINOMIAL_CELLS:
        a, b = BINOMIAL_CELLS[metric]
        x, x_obs = sample[:, idx[a]] + sample[:, idx[b]], g[a] + g[b]
        return (x <= x_obs).mean(), (x >= x_obs).mean()
    if metric == "mb":
        x, x_obs = sample[:, idx["fp"]] - sample[:, idx["fn"]], g["fp"] - g["fn"]
        return (x <= x_obs).mean(), (x >= x_obs).mean()
    a, margin = JOINT_RATIO_CELLS[metric]
    d = sample[:, idx[margin[:2]]] + sample[:, idx[margin[3:]]]
    d_obs = g[margin[:2]] + g[margin[3:]]
    num = sample[:, idx[a]]
    defined = d > 0
    lhs, rhs = num[defined] * d_obs, g[a] * d[defined]  # compare num/d with g[a]/d_obs exactly
    return (lhs <= rhs).mean(), (lhs >= rhs).mean()


CASES = [
    ((12, 3, 5, 20), (0.25, 0.1, 0.15, 0.5)),
    ((2, 1, 0, 7), (0.1, 0.2, 0.1, 0.6)),
    ((30, 22, 8, 40), (0.3, 0.1, 0.1, 0.5)),
    ((1, 0, 3, 26), (0.05, 0.05, 0.1, 0.8)),
]


@pytest.mark.parametrize(("group_cells", "reference_p"), CASES)
def test_exact_percentiles_match_monte_carlo(group_cells, reference_p):
    """It agrees with 400,000 simulated groups for every metric (within 5 standard errors)."""
    reference = frame(tuple(int(p * 1_000_000) for p in reference_p))
    result = match_test(frame(group_cells), reference, min_reference_ratio=0).set_index("metric")
    for metric in MATCH_METRICS:
        row = result.loc[metric]
        if row["reason"] is not None:
            continue
        lower, upper = simulated_percentiles(group_cells, reference_p, metric)
        tolerance = 5 * np.sqrt(0.25 / 400_000) + 1e-6
        assert row["percentile"] == pytest.approx(lower, abs=tolerance), metric
        assert row["p_value"] == pytest.approx(min(1, 2 * min(lower, upper)), abs=2 * tolerance), (
            metric
        )


@pytest.mark.parametrize("n", [20, 50, 100, 400, 2000])
@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.75])
def test_normal_approximation_within_berry_esseen(n, p):
    """It keeps the normal approximation within the Berry-Esseen bound wherever it is used."""
    k = np.arange(0, n + 1)
    group = pd.DataFrame({"tp": k, "fp": n - k, "fn": 0, "tn": 0})  # PREV = k/n
    reference = frame((int(p * 10_000), 10_000 - int(p * 10_000), 0, 0))
    result = match_test(group, reference, ["prev"], min_reference_ratio=0)
    used = result["percentile_approx"].notna()
    assert used.any() == (n * p >= 5 and n * (1 - p) >= 5)
    bound = 0.4748 * (p**2 + (1 - p) ** 2) / np.sqrt(n * p * (1 - p))
    error = (result["percentile"] - result["percentile_approx"])[used].abs()
    assert (error <= bound).all()


@pytest.mark.parametrize("n", [200, 1000, 5000])
@pytest.mark.parametrize("p", [(0.3, 0.1, 0.1, 0.5), (0.05, 0.15, 0.05, 0.75)])
def test_beta_approximation_tracks_exact(n, p):
    """It keeps the Beta approximation of joint-ratio percentiles close to the exact sum.

    The paper gives no error bound for eq. 11; the observed gap shrinks like 1/sqrt(n·(p_a+p_b))
    and stays below 1.5/sqrt(n·(p_a+p_b)) on this grid.
    """
    reference = frame(tuple(int(x * 100_000) for x in p))
    rng = np.random.default_rng(n)
    groups = pd.DataFrame(rng.multinomial(n, p, size=40), columns=CELLS)
    result = match_test(groups, reference, list(JOINT_RATIO_CELLS), min_reference_ratio=0)
    for metric, rows in result.groupby("metric"):
        _, margin = JOINT_RATIO_CELLS[metric]
        q = p[CELLS.index(margin[:2])] + p[CELLS.index(margin[3:])]
        gap = (rows["percentile"] - rows["percentile_approx"]).abs().max()
        assert gap < 1.5 / np.sqrt(n * q), (metric, gap)


def test_undefined_cases_have_reasons():
    """It reports no percentile, with the reason, when the group's or reference's metric is undefined."""
    result = match_test(
        frame((0, 3, 0, 5)), frame((10, 10, 10, 10)), ["tpr", "ppv"], min_reference_ratio=0
    ).set_index("metric")
    assert np.isnan(result.loc["tpr", "percentile"])
    assert result.loc["tpr", "reason"] == "tp+fn = 0 in group"
    result = match_test(frame((2, 3, 1, 5)), frame((0, 10, 0, 10)), ["tpr"], min_reference_ratio=0)
    assert result["reason"].iloc[0] == "tp+fn = 0 in reference"


def test_large_groups_use_the_approximation_within_its_error():
    """It switches to the approximation above the size limit, close to the exact sum there."""
    rng = np.random.default_rng(12)
    p = (0.3, 0.1, 0.1, 0.5)
    groups = pd.DataFrame(rng.multinomial(120_000, p, size=6), columns=CELLS)
    reference = frame(tuple(int(x * 1_000_000) for x in p))
    fast = match_test(groups, reference, ["tpr", "ppv", "mb"], min_reference_ratio=0)
    exact = match_test(
        groups, reference, ["tpr", "ppv", "mb"], exact_limit=float("inf"), min_reference_ratio=0
    )
    assert set(fast["method"]) == {"beta", "normal"} and set(exact["method"]) == {"exact"}
    assert np.abs(fast["percentile"] - exact["percentile"]).max() < 0.003
    assert np.abs(fast["p_value"] - exact["p_value"]).max() < 0.006


def test_predictions_group_counts_the_predictions_drawn():
    """``predictions_group`` is the n of the distribution: a group's labelled predictions, and
    every valid one, labelled or not, for PPR and PNR (counted by pandas from the rows)."""
    from biasaudit.tasks.api import audit_frame

    rng = np.random.default_rng(11)
    rows = pd.DataFrame(
        {
            "g": rng.choice(["a", "b", "c"], 900, p=[0.2, 0.3, 0.5]),
            "y_true": np.where(rng.random(900) < 0.25, np.nan, rng.integers(0, 2, 900)),
            "y_pred": rng.integers(0, 2, 900),
        }
    )
    result = audit_frame(rows, attributes=["g"], bootstrap_replicates=100)
    valid = rows.groupby("g").size()
    labelled = rows[rows["y_true"].notna()].groupby("g").size()
    got = result.match.set_index(["group_name", "metric"])["predictions_group"]
    for (group, metric), n in got.items():
        assert n == (valid if metric in {"ppr", "pnr"} else labelled)[group], (group, metric)
    assert {"ppr", "tpr", "acc", "mb"} <= set(result.match["metric"])
