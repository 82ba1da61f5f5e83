"""Counts are the confusion matrices of each group, intersection and complement."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from biasaudit.tasks.counts import (
    completeness_warnings,
    fisher_two_sided,
    group_counts,
    label_completeness,
)


def random_predictions(n=500, seed=1):
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "race": rng.choice(["A", "B", "C"], n, p=[0.7, 0.25, 0.05]),
            "sex": rng.choice(["F", "M"], n),
            "y_true": np.where(rng.random(n) < 0.1, np.nan, rng.integers(0, 2, n)),
            "y_pred": rng.integers(0, 2, n).astype("int8"),
        }
    )


def brute_force(rows: pd.DataFrame) -> dict:
    """Count one subset of rows by walking them one at a time."""
    out = {"tp": 0, "fp": 0, "fn": 0, "tn": 0, "unlabelled_pos": 0, "unlabelled_neg": 0}
    for y, p in zip(rows["y_true"], rows["y_pred"]):
        if np.isnan(y):
            out["unlabelled_pos" if p == 1 else "unlabelled_neg"] += 1
        else:
            out[{(1, 1): "tp", (0, 1): "fp", (1, 0): "fn", (0, 0): "tn"}[(int(y), int(p))]] += 1
    return out


def test_counts_match_row_by_row_counting():
    """It counts every group, intersection and complement as a row-by-row walk does."""
    data = random_predictions()
    counts = group_counts(data, ["race", "sex"], [["race", "sex"]]).set_index(
        ["attribute", "group_name", "subset"]
    )
    cells = ["tp", "fp", "fn", "tn", "unlabelled_pos", "unlabelled_neg"]
    assert (counts["n_unlabelled"] == counts["unlabelled_pos"] + counts["unlabelled_neg"]).all()
    for (attribute, group, subset), row in counts.iterrows():
        columns = attribute.split(" x ")
        member = data[columns].astype(str).agg(" x ".join, axis=1) == group
        expected = brute_force(data[member if subset == "group" else ~member])
        assert row[cells].to_dict() == expected, (attribute, group, subset)
    assert len(counts.loc["race x sex"]) == 2 * 6


def test_every_attribute_partitions_the_rows():
    """It puts each labelled row in exactly one group per attribute."""
    data = random_predictions(seed=2)
    counts = group_counts(data, ["race", "sex"], [["race", "sex"]])
    groups = counts[counts["subset"] == "group"]
    totals = groups.groupby("attribute")[["tp", "fp", "fn", "tn", "n_unlabelled"]].sum().sum(axis=1)
    assert (totals == len(data)).all()


def test_empty_input_gives_empty_counts():
    """It returns an empty, schema-valid frame for no rows."""
    assert group_counts(random_predictions().iloc[:0], ["race"], []).empty


def late_label_audit(rng, n=5000, selection=0.28, labelled_neg=(0.6, 0.3, 0.3)):
    """Equal selection rates in three groups; rejections labelled 60% in the first, 30% in the
    others; every accepted applicant labelled (the defect measured before PPR counted every
    decision)."""
    group = rng.choice(["A", "B", "C"], n)
    y_pred = (rng.random(n) < selection).astype("int8")
    y_true = (rng.random(n) < 0.5).astype(float)
    share = np.select(
        [group == "A", group == "B"], [labelled_neg[0], labelled_neg[1]], labelled_neg[2]
    )
    unlabelled = (y_pred == 0) & (rng.random(n) >= share)
    y_true[unlabelled] = np.nan
    return pd.DataFrame({"g": group, "y_true": y_true, "y_pred": y_pred})


def test_selection_rate_uses_every_prediction_and_completeness_is_reported():
    """It computes PPR over labelled and unlabelled predictions alike (the labelled-only PPR of
    the favoured-labelling group is ~0.37, not 0.28), and warns that labelled shares differ by the
    decision."""
    from biasaudit.tasks.metrics import compute_metrics

    data = late_label_audit(np.random.default_rng(5))
    counts = group_counts(data, ["g"], [])
    groups = counts[counts["subset"] == "group"].set_index("group_name")
    ppr = compute_metrics(groups.reset_index(), ["ppr"]).set_index("group_name")["value"]
    by_rows = data.groupby("g")["y_pred"].mean()
    assert np.allclose(ppr.sort_index(), by_rows.sort_index())
    labelled_only = data.dropna().groupby("g")["y_pred"].mean()
    assert labelled_only["A"] < labelled_only["B"] - 0.05  # what the old PPR reported
    completeness = label_completeness(counts, 0.05).set_index("group_name")
    by_rows_neg = data[data["y_pred"] == 0].groupby("g")["y_true"].apply(lambda y: y.notna().mean())
    assert np.allclose(
        completeness["completeness_predicted_neg"].sort_index(), by_rows_neg.sort_index()
    )
    assert completeness["uneven"].all()  # every group: selections all labelled, rejections not
    assert completeness_warnings(completeness.reset_index())[0].startswith(
        "labelled shares differ by decision in g groups A (100% of selected, 6"
    )


def test_fair_model_with_unequal_label_completeness_is_not_flagged():
    """It flags a fair model's PPR in at most α of 200 audits where rejections are labelled 60%
    in one group and 30% in the others (the labelled-only PPR flagged 200 of 200)."""
    from biasaudit.tasks.counts import comparison_pairs
    from biasaudit.tasks.detection import detect
    from biasaudit.tasks.rates import comparison_rates

    rng = np.random.default_rng(7)
    flagged = 0
    audits = 200
    for _ in range(audits):
        counts = group_counts(late_label_audit(rng), ["g"], [])
        result = detect(
            comparison_rates(*comparison_pairs(counts, {}), ["ppr"]), tolerance=0.0, alpha=0.05
        )
        flagged += bool(result["flagged"].any())
    # binomial(200, 0.05) exceeds 17 with probability < 0.01
    assert flagged <= 17


def full_outcomes(rng, n):
    """Attributes g (4 groups, 50/30/15/5%) and s (2), PPR 0.3, outcomes depending on the
    decision; every label known."""
    y_pred = (rng.random(n) < 0.3).astype("int8")
    return pd.DataFrame(
        {
            "g": rng.choice(4, n, p=[0.5, 0.3, 0.15, 0.05]).astype(str),
            "s": rng.choice(["F", "M"], n),
            "y_true": (rng.random(n) < 0.4 + 0.2 * y_pred).astype(float),
            "y_pred": y_pred,
        }
    )


def labelled_audit(rng, data, share, affected=None):
    """``data`` with labels observed with probability ``share[g]`` whatever the decision and
    outcome (missing at random), except in group ``affected``, where 90% of selections and 60%
    of rejections are labelled."""
    g = data["g"].astype(int).to_numpy()
    observed = np.asarray(share)[g]
    if affected is not None:
        observed = np.where(g == affected, np.where(data["y_pred"] == 1, 0.9, 0.6), observed)
    return data.assign(y_true=data["y_true"].where(rng.random(len(data)) < observed))


def warned(data: pd.DataFrame) -> bool:
    counts = group_counts(data, ["g", "s"], [["g", "s"]])
    return bool(label_completeness(counts, 0.05)["uneven"].any())


@pytest.mark.slow
def test_labels_missing_at_random_warn_in_at_most_alpha_of_audits():
    """It warns in at most α of 200 audits whose labels are missing by group only (labelled
    90/60/75/50% by group, whatever the decision), where the chi-square across groups warned in
    every audit; benchmarks/label_missingness.py measures it over 500 audits of each size."""
    rng = np.random.default_rng(11)
    share = [0.9, 0.6, 0.75, 0.5]
    warnings = sum(warned(labelled_audit(rng, full_outcomes(rng, 4000), share)) for _ in range(200))
    assert warnings <= 17  # binomial(200, 0.05) exceeds 17 with probability < 0.01


@pytest.mark.slow
def test_labels_missing_by_decision_warn_in_most_audits():
    """It warns in >= 80% of 100 audits where one group of ~600 labels 90% of its selections and
    60% of its rejections, naming that group and the metrics biased."""
    rng = np.random.default_rng(12)
    audits = [labelled_audit(rng, full_outcomes(rng, 4000), [0.75] * 4, 2) for _ in range(100)]
    assert sum(warned(a) for a in audits) >= 80
    counts = group_counts(audits[0], ["g", "s"], [["g", "s"]])
    lines = completeness_warnings(label_completeness(counts, 0.05))
    assert lines[0].startswith("labelled shares differ by decision in g groups 2 (9")
    assert BY_DECISION in lines[0] and BY_OUTCOME in lines[0]


def test_labels_missing_by_decision_bias_tpr_odds_by_the_label_ratio_and_not_ppv():
    """It holds what the docstring derives: with 90% of selections and 60% of rejections
    labelled, the labelled rows' TPR and FPR odds are the true odds x 1.5 and their PPV and NPV
    are unbiased."""
    rng = np.random.default_rng(13)
    full = full_outcomes(rng, 300_000)
    labelled = labelled_audit(rng, full, [0.75] * 4, affected=0).dropna()
    full, labelled = full[full["g"] == "0"], labelled[labelled["g"] == "0"]  # the affected group

    def odds(rows, given, value):
        other = "y_pred" if given == "y_true" else "y_true"
        rate = rows.loc[rows[given] == value, other].mean()
        return rate / (1 - rate)

    for actual in (1.0, 0.0):  # TPR (among actual positives), FPR (among actual negatives)
        ratio = odds(labelled, "y_true", actual) / odds(full, "y_true", actual)
        assert ratio == pytest.approx(1.5, rel=0.04)
    for decision in (1, 0):  # PPV, NPV
        ratio = odds(labelled, "y_pred", decision) / odds(full, "y_pred", decision)
        assert ratio == pytest.approx(1.0, rel=0.04)


def test_holm_matches_statsmodels():
    """It adjusts p-values as statsmodels' Holm does."""
    from statsmodels.stats.multitest import multipletests

    from biasaudit.tasks.multiplicity import holm_adjust

    p = np.random.default_rng(14).uniform(0, 0.2, 25) ** 2
    assert holm_adjust(p) == pytest.approx(multipletests(p, method="holm")[1], rel=1e-12)


def test_fisher_two_sided_equals_scipy_table_by_table():
    """All tables at once equal scipy.stats.fisher_exact on each (its two-sided p-value), from
    tables of zeros and ties at the mode to counts of hundreds of thousands; a table with an empty
    row or column has p = 1."""
    rng = np.random.default_rng(7)
    scales = (2, 3, 10, 60, 400, 5000, 300_000)
    tables = [rng.integers(0, s, size=(150, 4)) for s in scales]
    margins = rng.integers(1, 40, size=(100, 1))  # proportional rows: the observed table is the mode
    tables.append(np.hstack([margins, 2 * margins, 3 * margins, 6 * margins]))
    tables.append(np.array([[0, 0, 0, 0], [5, 0, 0, 0], [0, 3, 0, 2], [1, 1, 1, 1], [2, 1, 1, 2]]))
    table = np.vstack(tables)
    ours = fisher_two_sided(*table.T)
    expected = np.array(
        [
            1.0
            if (t.sum(axis=0) == 0).any() or (t.sum(axis=1) == 0).any()
            else stats.fisher_exact(t).pvalue
            for t in table.reshape(-1, 2, 2)
        ]
    )
    np.testing.assert_allclose(ours, expected, rtol=1e-12, atol=0)
    assert ours[-5:-1].tolist() == [1.0, 1.0, 1.0, 1.0]  # empty rows or columns; the mode


# Labels missing by outcome against labels missing by decision. One group of a
# population with prevalence 0.4, TPR 0.70 and PPV 2/3: per 100 rows TP 28, FN 12, FP 14, TN 46.
# Every expected value below is worked out by hand from these cells, not by the code under test.
CELLS = {"tp": 0.28, "fn": 0.12, "fp": 0.14, "tn": 0.46}


def _kept_audit(rng, n: int, keep) -> pd.DataFrame:
    """n rows of the population above; a row keeps its label with probability keep(y_true, y_pred)."""
    codes = rng.choice(4, n, p=[CELLS["tn"], CELLS["fp"], CELLS["fn"], CELLS["tp"]])
    y_true, y_pred = (codes >= 2).astype(float), (codes % 2).astype("int8")
    y_true[rng.random(n) >= keep(y_true, y_pred)] = np.nan
    return pd.DataFrame({"g": "A", "y_true": y_true, "y_pred": y_pred})


def _labelled_metrics(data: pd.DataFrame) -> pd.Series:
    from biasaudit.tasks.metrics import compute_metrics

    counts = group_counts(data, ["g"], [])
    groups = counts[counts["subset"] == "group"]
    metrics = compute_metrics(groups, ["tpr", "fpr", "ppv", "npv", "prev", "ppr"])
    return metrics.set_index("metric")["value"]


BY_DECISION = "by the decision: TPR, FPR, FNR and TNR are biased, PPV, FDR, NPV and FOR are not"
BY_OUTCOME = "by the outcome: PPV, FDR, NPV and FOR are biased, TPR, FPR, FNR and TNR are not"


def test_labels_missing_by_outcome_bias_ppv_not_tpr_and_the_warning_says_so():
    """The issue's example: half of the positives and 90% of the negatives keep their label. The
    labelled rows' TPR stays 0.70 and FPR 0.14/0.60, while PPV falls from 2/3 to
    0.14/(0.14 + 0.126) = 1/1.9, NPV rises from 0.46/0.58 to 0.414/0.474 and prevalence falls
    from 0.40 to 0.20/0.74. The warning fires (selections are labelled 63%, rejections 82%), says
    which metrics each mechanism biases, and that labelled rows cannot tell the two apart."""
    n = 400_000
    data = _kept_audit(np.random.default_rng(40), n, lambda y, d: np.where(y == 1, 0.5, 0.9))
    got = _labelled_metrics(data)
    labelled = {"tp": 0.14, "fn": 0.06, "fp": 0.126, "tn": 0.414}  # 0.5 x positives, 0.9 x negatives
    expected = {
        "tpr": 0.14 / 0.20,  # = 0.70, the population's TPR
        "fpr": 0.126 / 0.54,  # = 0.14 / 0.60, the population's FPR
        "ppv": 0.14 / 0.266,  # 1/1.9 = 0.526, not 2/3
        "npv": 0.414 / 0.474,  # 0.873, not 0.46/0.58 = 0.793
        "prev": 0.20 / 0.74,  # 0.270, not 0.40
        "ppr": 0.42,  # every prediction, labelled or not
    }
    assert sum(labelled.values()) == pytest.approx(0.74)
    assert expected["tpr"] == pytest.approx(0.70) and expected["ppv"] == pytest.approx(1 / 1.9)
    denominators = {"tpr": 0.20, "fpr": 0.54, "ppv": 0.266, "npv": 0.474, "prev": 0.74, "ppr": 1}
    for metric, value in expected.items():
        se = np.sqrt(value * (1 - value) / (n * denominators[metric]))
        assert abs(got[metric] - value) < 5 * se, metric
    counts = group_counts(data, ["g"], [])
    lines = completeness_warnings(label_completeness(counts, 0.05))
    assert len(lines) == 1
    assert BY_OUTCOME in lines[0] and BY_DECISION in lines[0]
    assert "labelled rows alone cannot tell" in lines[0]
    assert "TPR, FPR, FNR, TNR and the metrics mixing" not in lines[0]  # the old, wrong claim


def test_labels_missing_by_decision_bias_tpr_not_ppv_and_warn_alike():
    """The mirror case: 90% of selections and 60% of rejections keep their label. PPV stays 2/3
    and NPV 0.46/0.58, TPR rises to 0.252/0.324 = 7/9 and FPR to 0.126/0.402. The warning is the
    same sentence as under labels missing by outcome: both mechanisms show as labelled shares that
    differ by decision."""
    n = 400_000
    data = _kept_audit(np.random.default_rng(41), n, lambda y, d: np.where(d == 1, 0.9, 0.6))
    got = _labelled_metrics(data)
    expected = {"ppv": 0.252 / 0.378, "npv": 0.276 / 0.348, "tpr": 0.252 / 0.324, "fpr": 0.126 / 0.402}
    assert expected["ppv"] == pytest.approx(2 / 3) and expected["tpr"] == pytest.approx(7 / 9)
    denominators = {"ppv": 0.378, "npv": 0.348, "tpr": 0.324, "fpr": 0.402}
    for metric, value in expected.items():
        se = np.sqrt(value * (1 - value) / (n * denominators[metric]))
        assert abs(got[metric] - value) < 5 * se, metric
    lines = completeness_warnings(label_completeness(group_counts(data, ["g"], []), 0.05))
    assert len(lines) == 1 and BY_OUTCOME in lines[0] and BY_DECISION in lines[0]


def _arrivals(rng, n: int, mean_days) -> pd.DataFrame:
    """The population above, each label arriving mean_days(y_true, y_pred) days on average
    (exponential) after its prediction; the audit is 10 days after the predictions, so a label
    that takes longer is still missing (y_true NaN, labelled_at NaT)."""
    data = _kept_audit(rng, n, lambda y, d: np.ones(len(y)))
    delay = rng.exponential(mean_days(data["y_true"].to_numpy(), data["y_pred"].to_numpy()))
    predicted = pd.Timestamp("2026-01-01")
    late = delay > 10
    data.loc[late, "y_true"] = np.nan
    labelled_at = predicted + pd.to_timedelta(delay, unit="D")
    return data.assign(predicted_at=predicted, labelled_at=labelled_at.where(~late))


def test_arrival_times_tell_labels_missing_by_outcome_from_missing_by_decision():
    """With each label's arrival time the two mechanisms differ: within one decision, labels of
    positives arriving later (20 days on average against 5 for negatives) is missingness by
    outcome, and the warning says PPV, FDR, NPV, FOR are the biased ones; labels whose delay
    depends on the decision only (5 days for selections, 20 for rejections) arrive as fast for
    both outcomes within a decision, and the warning says the arrival times are consistent with
    missingness by decision."""
    from biasaudit.tasks.counts import arrival_evidence

    rng = np.random.default_rng(42)
    by_outcome = _arrivals(rng, 20_000, lambda y, d: np.where(y == 1, 20.0, 5.0))
    by_decision = _arrivals(rng, 20_000, lambda y, d: np.where(d == 1, 5.0, 20.0))
    for data, expected in ((by_outcome, True), (by_decision, False)):
        counts = group_counts(data, ["g"], [])
        completeness = label_completeness(counts, 0.05)
        assert completeness["uneven"].all()  # both: labelled shares differ by decision
        evidence = arrival_evidence(data, ["g"], [], "labelled_at", alpha=0.05)
        assert bool(evidence["by_outcome"].iloc[0]) is expected
        line = completeness_warnings(completeness, evidence)[0]
        if expected:
            assert "labels of positives arrive later than those of negatives" in line
            assert "missing by the outcome: PPV, FDR, NPV and FOR are biased" in line
        else:
            assert "arrival times are consistent with labels missing by the decision" in line
            assert "TPR, FPR, FNR and TNR are biased" in line


@pytest.mark.slow
def test_arrival_evidence_keeps_its_size_when_arrival_follows_the_decision_only():
    """Delays that depend on the decision only: arrival_evidence says by outcome in at most
    α of 200 audits (binomial(200, 0.05) exceeds 17 with probability < 0.01)."""
    from biasaudit.tasks.counts import arrival_evidence

    rng = np.random.default_rng(43)
    said = 0
    for _ in range(200):
        data = _arrivals(rng, 2_000, lambda y, d: np.where(d == 1, 5.0, 20.0))
        said += bool(arrival_evidence(data, ["g"], [], "labelled_at", alpha=0.05)["by_outcome"].any())
    assert said <= 17


def test_audit_frame_reads_the_arrival_times_it_is_given():
    """audit_frame(label_time=...) puts what the arrival times tell in the run's warnings; without
    it the warning says labelled rows cannot tell the mechanisms apart."""
    from biasaudit import audit_frame

    data = _arrivals(np.random.default_rng(44), 20_000, lambda y, d: np.where(y == 1, 20.0, 5.0))
    told = audit_frame(data, attributes=["g"], label_time="labelled_at")
    line = told.summary["label_completeness_warnings"][0]
    assert "in A labels of positives arrive later than those of negatives" in line
    plain = audit_frame(data.drop(columns="labelled_at"), attributes=["g"])
    assert "labelled rows alone cannot tell" in plain.summary["label_completeness_warnings"][0]


def _run_late_counts(data: pd.DataFrame) -> pd.DataFrame:
    """Labelled rows per (g, y_true, y_pred, late) as an audit run's scan counts them
    (db.sources.cells.arrival_counts): late above the median delay of the labelled rows with the same
    decision, one threshold per decision for every group (the lower median, as ORDER BY ...
    OFFSET (n - 1) // 2 finds it)."""
    labelled = data[data["y_true"].notna()]
    delay = (labelled["labelled_at"] - labelled["predicted_at"]).dt.total_seconds()
    threshold = delay.groupby(labelled["y_pred"]).transform(
        lambda d: np.sort(d.to_numpy())[(len(d) - 1) // 2]
    )
    frame = labelled.assign(late=delay > threshold, n=1)
    return frame.groupby(["g", "y_true", "y_pred", "late"], as_index=False)["n"].sum()


@pytest.mark.slow
def test_run_arrival_evidence_keeps_its_size_with_one_threshold_per_decision():
    """The run's test (one median delay per decision for every group, tasks.counts
    .arrival_evidence_of_counts), with delays that depend on the decision and the group but
    never the outcome: says by outcome in at most α of 200 audits (binomial(200, 0.05) exceeds
    17 with probability < 0.01); with positives' labels later, it says so."""
    from biasaudit.tasks.counts import arrival_evidence_of_counts

    rng = np.random.default_rng(45)
    said = 0
    for _ in range(200):
        data = _arrivals(rng, 2_000, lambda y, d: np.where(d == 1, 5.0, 20.0))
        group = rng.choice(["A", "B"], len(data))
        data = data.assign(  # two groups, A's labels also twice as slow
            g=group,
            labelled_at=data["predicted_at"]
            + (data["labelled_at"] - data["predicted_at"]) * np.where(group == "A", 2, 1),
        )
        evidence = arrival_evidence_of_counts(_run_late_counts(data), ["g"], [], 0.05)
        said += bool(evidence["by_outcome"].any())
    assert said <= 17
    data = _arrivals(rng, 20_000, lambda y, d: np.where(y == 1, 20.0, 5.0))
    evidence = arrival_evidence_of_counts(_run_late_counts(data), ["g"], [], 0.05)
    assert evidence["by_outcome"].all()
