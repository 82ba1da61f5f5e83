"""Counts are the confusion matrices of each group, intersection and complement."""

import numpy as np
import pandas as pd

from biasaudit.tasks.counts import completeness_warnings, group_counts, label_completeness


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
    the favoured-labelling group is ~0.37, not 0.28), and warns that completeness differs."""
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
    assert completeness["uneven"].all()
    assert (
        "label completeness differs between g groups"
        in completeness_warnings(completeness.reset_index())[0]
    )
    even = label_completeness(
        group_counts(
            late_label_audit(np.random.default_rng(6), labelled_neg=(0.3, 0.3, 0.3)), ["g"], []
        ),
        0.05,
    )
    assert not even["uneven"].any()


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
        result = detect(comparison_rates(*comparison_pairs(counts, {}), ["ppr"]), tolerance=0.0, alpha=0.05)
        flagged += bool(result["flagged"].any())
    # binomial(200, 0.05) exceeds 17 with probability < 0.01
    assert flagged <= 17
