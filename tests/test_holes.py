"""Hole counts (undefined cases) against brute-force enumeration of every confusion matrix."""

import math

import numpy as np
import pandas as pd
import pytest

from biasaudit.tasks.metrics import (
    GROUP_METRICS,
    all_confusion_matrices,
    compute_metrics,
    count_holes,
    two_group_metrics,
)


def test_all_confusion_matrices_has_the_stars_and_bars_count():
    """It enumerates C(n+3, 3) distinct matrices of size n (theorem A.1)."""
    for n in range(12):
        cm = all_confusion_matrices(n)
        assert len(cm) == math.comb(n + 3, 3) == len(cm.drop_duplicates())
        assert (cm.sum(axis=1) == n).all()


@pytest.mark.parametrize("metric", GROUP_METRICS)
def test_hole_counts_match_brute_force_up_to_30(metric):
    """It counts, for n = 0..30, exactly the matrices on which the metric computes to undefined."""
    for n in range(31):
        brute = int(compute_metrics(all_confusion_matrices(n), [metric])["value"].isna().sum())
        assert count_holes(metric, n) == brute, (metric, n)


def test_spec_reference_counts():
    """It gives the counts brute force finds: PT 721 at n = 100, MCC 4n, F1 C(n+2,2), TE 770 for
    sizes 3 and 5."""
    assert count_holes("pt", 100) == 721
    assert count_holes("mcc", 100) == 400
    assert count_holes("f1", 100) == math.comb(102, 2)
    assert count_holes("recall", 100) == 101
    assert count_holes("te", 3, 5) == 770
    assert count_holes("ofi", 3, 5) == 0


@pytest.mark.parametrize(("n1", "n2"), [(1, 1), (3, 5), (4, 2), (6, 6)])
def test_two_group_holes_match_brute_force_over_pairs(n1, n2):
    """It counts TE and OFI holes as enumerating every pair of matrices does."""
    a, b = all_confusion_matrices(n1), all_confusion_matrices(n2)
    pairs = a.merge(b, how="cross", suffixes=("", "_b"))
    group = pairs[["tp", "fp", "fn", "tn"]]
    reference = pairs[["tp_b", "fp_b", "fn_b", "tn_b"]].set_axis(["tp", "fp", "fn", "tn"], axis=1)
    result = two_group_metrics(group, reference)
    holes = result.groupby("metric")["value"].apply(lambda v: int(v.isna().sum()))
    assert holes["te"] == count_holes("te", n1, n2)
    assert holes["ofi"] == count_holes("ofi", n1, n2) == 0


def test_two_group_values():
    """It computes OFI = MB_a − MB_b and TE = FN_a/FP_a − FN_b/FP_b with reasons."""
    group = pd.DataFrame({"tp": [5, 5], "fp": [2, 0], "fn": [4, 1], "tn": [9, 4]})
    reference = pd.DataFrame({"tp": [10, 10], "fp": [5, 5], "fn": [5, 5], "tn": [30, 30]})
    result = two_group_metrics(group, reference).set_index(["metric"]).groupby(level=0)
    ofi = result.get_group("ofi")["value"].to_numpy()
    te = result.get_group("te")
    assert ofi == pytest.approx([(2 - 4) / 20 - 0.0, (0 - 1) / 10 - 0.0])
    assert te["value"].iloc[0] == pytest.approx(4 / 2 - 5 / 5)
    assert np.isnan(te["value"].iloc[1]) and te["undefined_reason"].iloc[1] == "fp = 0 in group"
