"""Counts are the confusion matrices of each group, intersection and complement."""

import numpy as np
import pandas as pd
from biasaudit.tasks.counts import group_counts


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
    out = {"tp": 0, "fp": 0, "fn": 0, "tn": 0, "n_unlabelled": 0}
    for y, p in zip(rows["y_true"], rows["y_pred"]):
        if np.isnan(y):
            out["n_unlabelled"] += 1
        else:
            out[{(1, 1): "tp", (0, 1): "fp", (1, 0): "fn", (0, 0): "tn"}[(int(y), int(p))]] += 1
    return out


def test_counts_match_row_by_row_counting():
    """It counts every group, intersection and complement as a row-by-row walk does."""
    data = random_predictions()
    counts = group_counts(data, ["race", "sex"], [["race", "sex"]]).set_index(
        ["attribute", "group_name", "subset"]
    )
    cells = ["tp", "fp", "fn", "tn", "n_unlabelled"]
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
