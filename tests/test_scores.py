"""Score audits (tasks.scores) from binned counts, checked against independent computations on rows
(scikit-learn, statsmodels, pandas) and by simulation (benchmarks/score_coverage.py has the full
figures)."""

import itertools

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, special, stats
from sklearn.metrics import roc_auc_score
from statsmodels.stats.contingency_tables import StratifiedTable
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from biasaudit.tasks import scores as S

from .conftest import COMPAS


def _rows(seed: int, n: int, values: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(float)
    score = np.round(rng.normal(size=n) + y, 1) if values > 20 else rng.integers(1, values + 1, n)
    return pd.DataFrame(
        {"y_true": y, "score": score.astype(float), "g": rng.choice(["a", "b", "c"], n)}
    )


def _delong_on_rows(y: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    """DeLong et al. (1988) from every (positive, negative) pair."""
    pos, neg = s[y == 1], s[y == 0]
    psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    v10, v01 = psi.mean(1), psi.mean(0)
    return psi.mean(), v10.var(ddof=1) / len(pos) + v01.var(ddof=1) / len(neg)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.integers(5, 400), st.sampled_from([2, 10, 200]))
def test_auc_and_delong_variance_equal_the_rows(seed, n, values):
    """Ties included: AUC equals roc_auc_score, variance DeLong's from all pairs, to 1e-9."""
    rows = _rows(seed, n, values)
    counts = S.score_counts(rows, [["g"]], np.unique(rows["score"]), rows["score"].median())
    for name, part in rows.groupby("g"):
        if part["y_true"].nunique() < 2 or min(np.bincount(part["y_true"].astype(int))) < 2:
            continue
        mine = counts[counts["group_name"] == name]
        auc, variance = S.auc_and_variance(mine["positives"], mine["negatives"])
        expected_auc, expected_var = _delong_on_rows(part["y_true"].values, part["score"].values)
        assert auc[0] == pytest.approx(roc_auc_score(part["y_true"], part["score"]), abs=1e-9)
        assert auc[0] == pytest.approx(expected_auc, abs=1e-12)
        assert variance[0] == pytest.approx(expected_var, abs=1e-12)


def test_equal_auc_test_of_large_samples_compares_logits_of_the_rows():
    """From SMALL_SAMPLE positives and negatives on both sides, the test of equal AUC is the
    delta-method z on the logit scale, computed here from each sample's rows (roc_auc_score and
    DeLong's variance from all pairs); with a side below SMALL_SAMPLE it stays on the AUC's own
    scale."""
    rng = np.random.default_rng(7)
    sides = []
    for n, shift in ((300, 1.0), (900, 1.4)):
        y = (rng.random(n) < 0.4).astype(int)
        score = np.round(rng.normal(size=n) + shift * y, 1)
        auc = roc_auc_score(y, score)
        variance = _delong_on_rows(y, score)[1]
        sides.append((auc, variance, float(y.sum()), float(n - y.sum())))
    (a, va, *_), (b, vb, *_) = sides
    z = (np.log(a / (1 - a)) - np.log(b / (1 - b))) / np.sqrt(
        va / (a * (1 - a)) ** 2 + vb / (b * (1 - b)) ** 2
    )
    assert S.independent_auc_test(*sides) == pytest.approx(2 * stats.norm.sf(abs(z)), rel=1e-12)
    small = (a, va, 40.0, 60.0)  # the AUC's own scale; the variance floored by Hanley & McNeil's
    p, q = sides[1][2], sides[1][3]
    shared = (a * 2400 + b * p * q) / (2400 + p * q)
    q1, q2 = shared / (2 - shared), 2 * shared**2 / (1 + shared)  # eq. 2 of Hanley & McNeil (1982)
    floor = (shared * (1 - shared) + 39 * (q1 - shared**2) + 59 * (q2 - shared**2)) / 2400
    raw = (a - b) / np.sqrt(max(va, floor) + vb)
    assert S.independent_auc_test(small, sides[1]) == pytest.approx(
        2 * stats.norm.sf(abs(raw)), rel=1e-12
    )


def test_quantile_bins_of_a_continuous_score():
    """More than 20 values: decile bins; every score falls in the bin of its lower edge."""
    rows = _rows(3, 1000, 1000)
    edges = S.score_edges(rows["score"].values)
    assert len(edges) == 10 and edges[0] == rows["score"].min()
    bins = S.bin_of(rows["score"].values, edges)
    assert (bins <= rows["score"]).all()
    assert np.array_equal(S.score_edges(np.array([3.0, 1.0, 3.0, 2.0])), [1.0, 2.0, 3.0])


def test_clopper_pearson_equals_statsmodels():
    x, n = np.array([0, 1, 5, 9, 10, 0]), np.array([10, 10, 10, 10, 10, 3])
    low, high = S.clopper_pearson(x, n, 0.95)
    expected = proportion_confint(x, n, alpha=0.05, method="beta")
    np.testing.assert_allclose(low, np.nan_to_num(expected[0], nan=0.0), atol=1e-12)
    np.testing.assert_allclose(high, np.nan_to_num(expected[1], nan=1.0), atol=1e-12)


def _glm(formula_frame, columns, y, weights, offset=None):
    design = sm.add_constant(formula_frame[columns].astype(float), has_constant="add")
    return sm.GLM(
        y, design, family=sm.families.Binomial(), freq_weights=weights, offset=offset
    ).fit()


@pytest.mark.parametrize("probability", [True, False])
def test_recalibration_equals_a_statsmodels_glm_on_rows(probability):
    rng = np.random.default_rng(7)
    n = 3000
    raw = np.clip(np.round(rng.random(n), 2), 0.01, 0.99) if probability else rng.integers(1, 11, n)
    p = raw if probability else raw / 11
    rows = pd.DataFrame(
        {"y_true": (rng.random(n) < p**1.3).astype(float), "score": raw * 1.0, "g": "a"}
    )
    counts = S.score_counts(rows, [["g"]], np.unique(rows["score"]), rows["score"].median())
    labelled = counts["positives"] + counts["negatives"]
    large, slope = S.recalibration(
        counts["score_sum"] / labelled, counts["positives"], counts["negatives"], probability
    )
    x = np.log(rows["score"] / (1 - rows["score"])) if probability else rows["score"]
    fitted = _glm(pd.DataFrame({"x": x}), ["x"], rows["y_true"], None)
    assert slope == pytest.approx(fitted.params["x"], abs=1e-7)
    if probability:
        offset_fit = sm.GLM(
            rows["y_true"], np.ones((n, 1)), family=sm.families.Binomial(), offset=x
        ).fit()
        assert large == pytest.approx(offset_fit.params.iloc[0], abs=1e-7)
    else:
        assert np.isnan(large)


def test_calibration_test_equals_the_score_test_on_rows():
    """The generalised Cochran-Mantel-Haenszel statistic, from the rows: per score value, the
    group's observed minus expected positives and their hypergeometric variance; its first
    component alone is statsmodels' Mantel-Haenszel test."""
    rng = np.random.default_rng(11)
    n = 2000
    g = rng.random(n) < 0.3
    s = rng.integers(1, 11, n).astype(float)
    y = (rng.random(n) < 0.1 + 0.07 * s - 0.05 * g).astype(float)
    rows = pd.DataFrame({"y_true": y, "score": s, "g": np.where(g, "b", "a")})
    counts = S.score_counts(rows, [["g"]], np.unique(s), np.median(s))
    mine = S.score_comparisons(counts, S.bins_of_scores(s), {}).set_index("group_name").loc["b"]
    u, v, tables = np.zeros(2), np.zeros((2, 2)), []
    x_centre = s.mean()
    for value, part in rows.groupby("score"):
        in_g = part["g"] == "b"
        m_g, m, k = in_g.sum(), len(part), part["y_true"].sum()
        z = np.array([1.0, value - x_centre])
        u += z * (part.loc[in_g, "y_true"].sum() - m_g * k / m)
        v += np.outer(z, z) * m_g * (m - m_g) * k * (m - k) / (m**2 * (m - 1))
        tables.append(pd.crosstab(in_g, part["y_true"]).to_numpy())
    assert mine["calibration_statistic"] == pytest.approx(u @ np.linalg.solve(v, u), rel=1e-9)
    first = StratifiedTable(tables).test_null_odds(correction=False).statistic
    assert u[0] ** 2 / v[0, 0] == pytest.approx(first, rel=1e-9)


def test_threshold_sweep_equals_the_rows():
    rows = _rows(5, 800, 10)
    rows.loc[::7, "y_true"] = np.nan  # unlabelled rows count in selection only
    counts = S.score_counts(rows, [["g"]], np.unique(rows["score"]), rows["score"].median())
    sweep = S.threshold_sweep(counts).set_index(["group_name", "threshold"])
    for (name, threshold), got in sweep.iterrows():
        part = rows[rows["g"] == name]
        chosen = part["score"] >= threshold
        truth = part["y_true"]
        assert got["selected"] == chosen.sum()
        assert got["selection_rate"] == pytest.approx(chosen.mean(), abs=1e-12)
        assert got["fpr"] == pytest.approx((chosen & (truth == 0)).sum() / (truth == 0).sum())
        assert got["fnr"] == pytest.approx((~chosen & (truth == 1)).sum() / (truth == 1).sum())


@pytest.mark.skipif(not COMPAS.exists(), reason=f"{COMPAS} is absent")
def test_compas_calibration_per_decile_equals_pandas():
    raw = pd.read_csv(COMPAS)
    rows = pd.DataFrame(
        {"y_true": raw["two_year_recid"].astype(float), "score": raw["decile_score"] * 1.0}
    ).assign(race=raw["race"])
    counts = S.score_counts(
        rows, [["race"]], S.score_edges(rows["score"].values), rows["score"].median()
    )
    curves = S.calibration_curves(counts).set_index(["group_name", "score_bin"])
    expected = raw.groupby(["race", "decile_score"])["two_year_recid"].agg(["mean", "size"])
    expected.index = expected.index.set_levels(expected.index.levels[1].astype(float), level=1)
    observed = curves.loc[expected.index]
    np.testing.assert_allclose(observed["observed_rate"], expected["mean"], atol=1e-12)
    assert observed["labelled"].tolist() == expected["size"].tolist()


def _simulate(n, base, shift, reps, rng, bins=10):
    y = rng.random((reps, n)) < base
    b = np.searchsorted(np.linspace(-1.5, 2.5, bins - 1), rng.normal(size=(reps, n)) + shift * y)
    pos = np.stack([((b == k) & y).sum(1) for k in range(bins)], 1)
    neg = np.stack([((b == k) & ~y).sum(1) for k in range(bins)], 1)
    return pos, neg


def _true_auc(base, shift, rng):
    pos, neg = _simulate(200_000, base, shift, 1, rng)
    return S.auc_and_variance(pos, neg)[0][0]


@pytest.mark.parametrize(
    "n,base,shift", [(6, 0.5, 2.0), (8, 0.3, 1.0), (20, 0.3, 1.0), (40, 0.5, 2.0), (400, 0.4, 1.0)]
)
def test_auc_interval_covers(n, base, shift):
    """Coverage of the 95% interval >= 0.94 over 2,000 samples with a positive and a negative,
    tiny groups (one positive or one negative) included."""
    rng = np.random.default_rng(n)
    truth = _true_auc(base, shift, rng)
    pos, neg = _simulate(n, base, shift, 2000, rng)
    both = (pos.sum(1) > 0) & (neg.sum(1) > 0)
    _, _, low, high = S.auc_interval(pos[both], neg[both])
    assert ((low <= truth) & (truth <= high)).mean() >= 0.94


def _placements(total: int, bins: int = 3):
    """Every way to put ``total`` rows in ``bins`` score bins."""
    return [c for c in itertools.product(range(total + 1), repeat=bins) if sum(c) == total]


def test_auc_interval_contains_its_estimate_in_tiny_groups():
    """Every group of 1-5 positives and 1-5 negatives in 3 score bins (3,025 groups, AUC 0, 1
    and between): the AUC equals scikit-learn's on its rows and lies in its interval, 1 the upper
    end where it is 1 and 0 the lower end where it is 0. COMPAS's Asian x Female (one negative at
    decile 1, one positive at 3) was stored as AUC 1 with the interval [0.031, 0.996]."""
    groups = [
        (pos, neg)
        for p, q in itertools.product(range(1, 6), repeat=2)
        for pos in _placements(p)
        for neg in _placements(q)
    ]
    pos, neg = (np.array(side, dtype=float) for side in zip(*groups))
    auc, _, low, high = S.auc_interval(pos, neg)
    expected = [
        roc_auc_score(np.repeat([1, 0], [sum(p), sum(q)]), np.repeat([0, 1, 2, 0, 1, 2], p + q))
        for p, q in groups
    ]
    np.testing.assert_allclose(auc, expected, atol=1e-12)
    assert ((low >= 0) & (low <= auc) & (auc <= high) & (high <= 1)).all()
    assert (high[auc == 1] == 1).all() and (low[auc == 0] == 0).all()
    assert {0.0, 1.0} < set(auc) and ((auc > 0) & (auc < 1)).sum() > 2000
    assert (low < high).all()  # no group, however small, gets a point interval
    compas = S.auc_interval([0, 0, 1], [1, 0, 0])
    assert compas[0][0] == 1 and compas[2][0] < 1 and compas[3][0] == 1


@pytest.mark.parametrize(
    "auc,p,q", [(0.5, 1, 1), (0.75, 2, 2), (0.9, 3, 7), (0.2, 10, 4), (0.62, 40, 45)]
)
def test_newcombe_interval_solves_its_equation(auc, p, q):
    """Each end of the score-type interval is the root of (A - θ)² = z² V(θ) on its side of A,
    V written out from Newcombe (2006, Part 2, method 5), found by scipy's brentq."""
    z = stats.norm.ppf(0.975)
    each = (p + q) / 2 - 1

    def f(t):
        v = t * (1 - t) * (1 + each * (1 - t) / (2 - t) + each * t / (1 + t)) / (p * q)
        return (auc - t) ** 2 - z * z * v

    low, high = S.newcombe_interval(np.array([auc]), np.array([p]), np.array([q]))
    assert low[0] == pytest.approx(optimize.brentq(f, 0, auc, xtol=1e-14), abs=1e-9)
    assert high[0] == pytest.approx(optimize.brentq(f, auc, 1, xtol=1e-14), abs=1e-9)


@pytest.mark.parametrize("small", [15, 30, 60])
def test_auc_difference_and_calibration_tests_keep_their_size(small):
    """Under equal AUC and equal calibration, each test rejects at most alpha = 0.05 of 1,500
    simulated (group, rest) pairs, the group small."""
    rng = np.random.default_rng(small)
    g_pos, g_neg = _simulate(small, 0.4, 1.0, 1500, rng)
    r_pos, r_neg = _simulate(600, 0.4, 1.0, 1500, rng)
    auc_p, calibration_p = [], []
    bins = np.arange(10.0)
    for i in range(1500):
        auc_p.append(S.auc_difference_test(g_pos[i], g_neg[i], r_pos[i], r_neg[i]))
        group = (g_pos[i], g_neg[i], bins * (g_pos[i] + g_neg[i]))  # score sums
        rest = (r_pos[i], r_neg[i], bins * (r_pos[i] + r_neg[i]))
        calibration_p.append(S.equal_calibration_test(bins, group, rest, False)[2])
    for p_values in (np.array(auc_p, float), np.array(calibration_p, float)):
        made = p_values[~np.isnan(p_values)]
        assert (made < 0.05).mean() <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / len(made))


@pytest.mark.skipif(not COMPAS.exists(), reason=f"{COMPAS} is absent")
def test_compas_score_audit_through_the_api_equals_the_rows():
    """COMPAS with the decile score: recidivism per decile and race, AUC per race, FPR and FNR
    at every decile threshold, each equal to pandas or scikit-learn on the rows; the tests of
    equal AUC and calibration Benjamini-Hochberg adjusted as statsmodels' multipletests does."""
    from biasaudit.tasks.api import audit_frame

    raw = pd.read_csv(COMPAS)
    frame = pd.DataFrame(
        {
            "prediction_id": raw["id"].astype(str),
            "y_true": raw["two_year_recid"].astype(float),
            "y_pred": (raw["score_text"] != "Low").astype(int),
            "decile_score": raw["decile_score"],
            "race": raw["race"],
        }
    )
    result = audit_frame(frame, attributes=["race"], score="decile_score")
    curves = result.calibration.set_index(["group_name", "score_bin"])["observed_rate"]
    expected = raw.groupby(["race", "decile_score"])["two_year_recid"].mean()
    np.testing.assert_allclose(curves.loc[[(r, float(d)) for r, d in expected.index]], expected)
    auc = result.scores[result.scores["reference"] == "rest"].set_index("group_name")["auc_group"]
    for race, part in raw.groupby("race"):
        assert auc[race] == pytest.approx(
            roc_auc_score(part["two_year_recid"], part["decile_score"]), abs=1e-9
        )
    sweep = result.thresholds.set_index(["group_name", "threshold"])
    for race, part in raw.groupby("race"):
        truth = part["two_year_recid"] == 1
        for threshold in range(1, 11):
            chosen = part["decile_score"] >= threshold
            got = sweep.loc[(race, float(threshold))]
            assert got["fpr"] == pytest.approx((chosen & ~truth).sum() / (~truth).sum(), abs=1e-12)
            assert got["fnr"] == pytest.approx((~chosen & truth).sum() / truth.sum(), abs=1e-12)
    for test in ("auc", "calibration"):  # adjusted across every comparison of the audit
        raw_p = result.scores[f"{test}_p_value"].to_numpy(dtype=float)
        made = ~np.isnan(raw_p)
        expected_p = multipletests(raw_p[made], method="fdr_bh")[1]
        got_p = result.scores[f"{test}_p_adjusted"].to_numpy(dtype=float)
        np.testing.assert_allclose(got_p[made], expected_p, rtol=1e-12)
        assert np.isnan(got_p[~made]).all()


def test_a_score_column_without_numbers_is_one_clear_error():
    from biasaudit.tasks.api import audit_frame

    frame = pd.DataFrame({"y_true": [0, 1] * 20, "y_pred": [0, 1] * 20, "g": "a", "s": ["1"] * 40})
    frame.loc[7, "s"] = "high"
    with pytest.raises(ValueError, match="score column 's': 1 rows without a finite number"):
        audit_frame(frame, attributes=["g"], score="s")


def test_calibration_counts_the_labelled_and_the_sweep_every_prediction():
    """Per bin, calibration's ``labelled`` is the rows with a known outcome; the threshold
    sweep's ``n`` every valid row of the group, labelled or not (counted by pandas)."""
    from biasaudit.tasks.api import audit_frame

    rng = np.random.default_rng(5)
    rows = pd.DataFrame(
        {
            "g": rng.choice(["a", "b"], 800),
            "score": rng.integers(1, 6, 800) / 8,  # five values, each its own bin
            "y_true": np.where(rng.random(800) < 0.3, np.nan, rng.integers(0, 2, 800)),
            "y_pred": rng.integers(0, 2, 800),
        }
    )
    result = audit_frame(rows, attributes=["g"], score="score")
    labelled = rows[rows["y_true"].notna()].groupby(["g", "score"]).size()
    got = result.calibration.set_index(["group_name", "score_bin"])["labelled"]
    assert got.loc[labelled.index].tolist() == labelled.tolist()
    sweep = result.thresholds.groupby("group_name")["n"].unique()
    assert {g: list(n) for g, n in sweep.items()} == {
        g: [n] for g, n in rows.groupby("g").size().items()
    }


def _value_counts(scores: np.ndarray, y: np.ndarray):
    """(values, positives, negatives) per distinct score, by numpy."""
    values, index = np.unique(scores, return_inverse=True)
    positives = np.bincount(index, weights=y, minlength=len(values))
    return values, positives, np.bincount(index, minlength=len(values)) - positives


def test_own_calibration_test_equals_statsmodels_score_test_on_rows():
    """Counts per distinct score (ties: scores in hundredths) give statsmodels' score test of
    a = 0, b = 1 in the GLM logit P(y) = logit(p) + a + (b - 1) logit(p), fitted on the rows."""
    rng = np.random.default_rng(40)
    n = 800
    p = np.round(rng.beta(2, 4, n), 2).clip(0.01, 0.99)
    y = (rng.random(n) < np.clip(1.15 * p, 0, 1)).astype(float)
    logit = np.log(p / (1 - p))
    model = sm.GLM(y, np.column_stack([np.ones(n), logit]), family=sm.families.Binomial(),
                   offset=logit)  # fmt: skip
    statistic, p_value, df = model.score_test(np.zeros(2), k_constraints=2)
    assert df == 2
    got = S.own_calibration_test(*_value_counts(p, y))
    assert got[0] == pytest.approx(float(statistic[0]), rel=1e-9)
    assert (got[1], got[2]) == (2, pytest.approx(float(p_value[0]), rel=1e-9))
    one = S.own_calibration_test(np.array([0.3]), np.array([40.0]), np.array([60.0]))
    expected = (40 - 100 * 0.3) ** 2 / (100 * 0.3 * 0.7)  # one score: in-the-large only
    assert one[:2] == (pytest.approx(expected, rel=1e-9), 1)


def _calibrated_pairs(n: int, m: int, reps: int, rng):
    """Calibrated group (Beta(4, 2) scores) and reference (Beta(2, 4)): outcomes Bernoulli(score)."""
    for _ in range(reps):
        g, r = rng.beta(4, 2, n), rng.beta(2, 4, m)
        yield g, (rng.random(n) < g).astype(float), r, (rng.random(m) < r).astype(float)


def _limit(reps: int) -> float:
    return 0.05 + 2 * np.sqrt(0.05 * 0.95 / reps)


def test_calibrated_groups_with_different_scores_are_not_called_miscalibrated():
    """Both groups calibrated, their scores distributed differently: the product's test (each
    group's outcomes against its own scores, through score_comparisons on counts per value)
    rejects at most alpha + 2 standard errors of 200 samples; the test it replaced (equal outcome
    rates within the window's decile bins) rejects over 20% of the same samples."""
    rng = np.random.default_rng(41)
    product, replaced = [], []
    for g, gy, r, ry in _calibrated_pairs(500, 5000, 200, rng):
        rows = pd.DataFrame({"score": np.concatenate([g, r]), "y_true": np.concatenate([gy, ry]),
                             "a": ["g"] * len(g) + ["r"] * len(r)})  # fmt: skip
        counts = S.score_counts(rows, [["a"]], np.unique(rows["score"]), 0.5)
        bins = S.bins_of_scores(rows["score"].to_numpy())
        found = S.score_comparisons(counts, bins, {}).set_index("group_name")
        product.append(found.loc["g", "calibration_p_value"] < 0.05)
        binned = S.rebinned(counts, bins.edges)
        numbers = ["positives", "negatives", "score_sum"]
        sides = [binned[binned["group_name"] == name].set_index("score_bin")[numbers]
                 .reindex(bins.edges, fill_value=0) for name in ("g", "r")]  # fmt: skip
        triples = [tuple(s[c].to_numpy(float) for c in numbers) for s in sides]
        replaced.append(S.equal_calibration_test(bins.edges, *triples, True)[2] < 0.05)
    assert np.mean(product) <= _limit(200)
    assert np.mean(replaced) > 0.2


@pytest.mark.parametrize("a, b", [(4, 2), (20, 1), (0.5, 5)])
def test_own_calibration_keeps_its_size_in_small_groups(a, b):
    """5-49 labelled rows: the Monte Carlo p-value rejects a calibrated group at most alpha + 2
    standard errors of 1,000 samples, whatever its scores (Beta(20, 1): most near 1)."""
    rng = np.random.default_rng(int(a * 100 + b))
    for n in (5, 20, 49):
        rejected = []
        for _ in range(1000):
            s = rng.beta(a, b, n)
            rejected.append(S.own_calibration_test(*_value_counts(s, (rng.random(n) < s) * 1.0))[2]
                            < 0.05)  # fmt: skip
        assert np.mean(rejected) <= _limit(1000), n


def test_own_calibration_finds_a_miscalibrated_group():
    """Outcomes Bernoulli(score + 0.1) in 2,000 rows: rejected in at least 95% of 200 samples;
    an outcome at a score of 0 rejects at once."""
    rng = np.random.default_rng(43)
    found = []
    for _ in range(200):
        s = rng.beta(2, 4, 2000)
        found.append(S.own_calibration_test(*_value_counts(s, (rng.random(2000) < s + 0.1) * 1.0))[2]
                     < 0.05)  # fmt: skip
    assert np.mean(found) >= 0.95
    assert S.own_calibration_test(np.array([0.0, 0.5]), np.array([1.0, 30]), np.array([60.0, 30]))[
        2
    ] < 1e-6


def test_a_continuous_scores_auc_is_the_scores_own():
    """Through audit_frame, a continuous score's stored AUC per group (and its rest) equals
    scikit-learn's roc_auc_score on the rows to 1e-9, not the AUC of its decile bins."""
    from biasaudit.tasks.api import audit_frame

    rng = np.random.default_rng(44)
    n = 6000
    y = (rng.random(n) < 0.3).astype(float)
    rows = pd.DataFrame({"g": rng.choice(["a", "b", "c"], n), "y_true": y,
                         "s": rng.beta(2 + 2 * y, 4 - y)})  # fmt: skip
    rows["y_pred"] = (rows["s"] >= 0.5).astype(int)
    scores = audit_frame(rows, attributes=["g"], score="s", metrics=["fpr"]).scores
    rest = scores[scores["reference"] == "rest"].set_index("group_name")
    for name, part in rows.groupby("g"):
        other = rows[rows["g"] != name]
        assert rest.loc[name, "auc_group"] == pytest.approx(
            roc_auc_score(part["y_true"], part["s"]), abs=1e-9
        )
        assert rest.loc[name, "auc_reference"] == pytest.approx(
            roc_auc_score(other["y_true"], other["s"]), abs=1e-9
        )
        edges = S.score_edges(rows["s"].to_numpy())
        binned = roc_auc_score(part["y_true"], S.bin_of(part["s"].to_numpy(), edges))
        assert abs(rest.loc[name, "auc_group"] - binned) > 1e-4  # the binned score's differs


def test_each_groups_and_its_rests_recalibration_equal_statsmodels_on_rows(monkeypatch):
    """Groups are taken in blocks (here two groups a block) and each rest's fit starts at the
    attribute's: every group's and every rest's slope and in-the-large equal statsmodels' GLM on
    their rows to 1e-7, and AUC scikit-learn's, with a named reference beside the rest."""
    monkeypatch.setattr(S, "_BLOCK_CELLS", 2 * 900)
    rng = np.random.default_rng(45)
    n = 900
    rows = pd.DataFrame({"g": rng.choice(list("abcde"), n, p=[0.5, 0.2, 0.15, 0.1, 0.05]),
                         "score": rng.beta(2, 3, n)})  # fmt: skip
    rows["y_true"] = (rng.random(n) < rows["score"] ** np.where(rows["g"] == "a", 1.0, 1.4)) * 1.0
    counts = S.score_counts(rows, [["g"]], np.unique(rows["score"]), rows["score"].median())
    result = S.score_comparisons(counts, S.bins_of_scores(rows["score"]), {"g": "e"})
    for (name, reference), row in result.set_index(["group_name", "reference"]).iterrows():
        for side, part in (("group", rows[rows["g"] == name]),
                           ("reference", rows[rows["g"] != name] if reference == "rest"
                            else rows[rows["g"] == reference])):  # fmt: skip
            x = np.log(part["score"] / (1 - part["score"]))
            slope = _glm(pd.DataFrame({"x": x}), ["x"], part["y_true"], None).params["x"]
            large = sm.GLM(part["y_true"], np.ones((len(part), 1)),
                           family=sm.families.Binomial(), offset=x).fit().params.iloc[0]  # fmt: skip
            assert row[f"slope_{side}"] == pytest.approx(slope, abs=1e-7), (name, reference, side)
            assert row[f"in_the_large_{side}"] == pytest.approx(large, abs=1e-7)
            auc = roc_auc_score(part["y_true"], part["score"])
            assert row[f"auc_{side}"] == pytest.approx(auc, abs=1e-12)
    assert len(result) == 5 + 4


def test_batched_fits_halving_some_rows_keep_each_rows_own_fit():
    """Rows of one batch started far from their fits (as a rest from its attribute's fit) with
    slopes 0.2 to 6: some rows' steps are halved while others go on, and every row still ends at
    its own fit, statsmodels' GLM on its counts, to 1e-6."""
    rng = np.random.default_rng(46)
    values = np.linspace(-4, 4, 60)
    slopes = np.array([0.2, 1.0, 3.0, 6.0, 6.0, 0.2])
    trials = rng.integers(1, 30, (len(slopes), len(values))).astype(float)
    successes = rng.binomial(trials.astype(int), special.expit(slopes[:, None] * values)) * 1.0
    design = np.stack([np.ones_like(trials), np.broadcast_to(values, trials.shape)])
    start = np.tile([2.0, 8.0], (len(slopes), 1))
    fitted, _ = S.logistic_fits(design, successes, trials, start=start)
    for row, (y, m) in enumerate(zip(successes, trials)):
        glm = sm.GLM(np.column_stack([y, m - y]), sm.add_constant(values),
                     family=sm.families.Binomial()).fit()  # fmt: skip
        np.testing.assert_allclose(fitted[row], glm.params, atol=1e-6, err_msg=str(row))
