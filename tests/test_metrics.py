"""The metric catalogue against an independent exact computation, holes included."""

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from biasaudit.schemas.metric_ids import canonical_metric
from biasaudit.tasks.metrics import GROUP_METRICS, compute_metrics


def reference(metric, tp, fp, fn, tn):
    """Textbook definitions in exact arithmetic; None where the metric is undefined."""
    F = Fraction
    n = tp + fp + fn + tn

    def ratio(a, b):
        return None if b == 0 else F(a, b)

    binomial = {
        "acc": tp + tn,
        "prev": tp + fn,
        "ppr": tp + fp,
        "err": fp + fn,
        "nprev": fp + tn,
        "pnr": fn + tn,
    }
    if metric in binomial:
        return ratio(binomial[metric], n)
    joint = {
        "tpr": (tp, tp + fn),
        "fnr": (fn, tp + fn),
        "fpr": (fp, fp + tn),
        "tnr": (tn, fp + tn),
        "ppv": (tp, tp + fp),
        "fdr": (fp, tp + fp),
        "npv": (tn, tn + fn),
        "for": (fn, tn + fn),
    }
    if metric in joint:
        return ratio(*joint[metric])
    if metric == "f1":
        precision, recall = ratio(tp, tp + fp), ratio(tp, tp + fn)
        if not precision or not recall:  # undefined or zero: 1/precision or 1/recall fails
            return None
        return 2 / (1 / precision + 1 / recall)
    if metric == "f1s":
        return ratio(2 * tp, 2 * tp + fp + fn)
    if metric == "mcc":
        product = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
        return None if product == 0 else (tp * tn - fp * fn) / math.sqrt(product)
    if metric == "pt":
        tpr, fpr = ratio(tp, tp + fn), ratio(fp, fp + tn)
        if tpr is None or fpr is None or tpr == fpr:
            return None
        return (math.sqrt(tpr * fpr) - fpr) / (tpr - fpr)
    if metric == "mb":
        return ratio(fp - fn, n)
    raise KeyError(metric)


def random_counts(size=400, seed=0):
    rng = np.random.default_rng(seed)
    cells = rng.integers(0, 6, size=(size, 4)) * (rng.random((size, 4)) < 0.7)
    return pd.DataFrame(cells, columns=["tp", "fp", "fn", "tn"]).assign(key=np.arange(size))


def test_every_metric_matches_exact_reference_on_random_matrices():
    """It matches exact arithmetic on 400 random small matrices, including every hole."""
    counts = random_counts()
    result = compute_metrics(counts)
    assert len(result) == len(counts) * len(GROUP_METRICS)
    undefined_seen = set()
    for row in result.itertuples():
        cells = counts.loc[row.key, ["tp", "fp", "fn", "tn"]].astype(int).tolist()
        expected = reference(row.metric, *cells)
        if expected is None:
            assert np.isnan(row.value) and row.undefined_reason, (row.metric, cells)
            undefined_seen.add(row.metric)
        else:
            assert row.undefined_reason is None, (row.metric, cells)
            assert row.value == pytest.approx(float(expected), abs=1e-12), (row.metric, cells)
    assert undefined_seen == set(GROUP_METRICS)  # the sample reaches every kind of hole, n = 0 too


def test_reasons_name_the_zero_denominator():
    """It names the zero denominator, and lists all of them for MCC."""
    counts = pd.DataFrame({"tp": [0], "fp": [3], "fn": [0], "tn": [0]})
    result = compute_metrics(counts, ["tpr", "ppv", "mcc", "f1", "pt"]).set_index("metric")
    assert result.loc["tpr", "undefined_reason"] == "tp+fn = 0 (no actual positives)"
    assert result.loc["ppv", "value"] == 0.0 and result.loc["ppv", "undefined_reason"] is None
    assert result.loc["mcc", "undefined_reason"] == (
        "tp+fn = 0 (no actual positives); fn+tn = 0 (no predicted negatives)"
    )
    assert "tp = 0" in result.loc["f1", "undefined_reason"]


def test_f1_is_not_zero_when_tp_is_zero():
    """It keeps F1 undefined at TP = 0 (the paper's definition), where F1* is 0."""
    result = compute_metrics(
        pd.DataFrame({"tp": [0], "fp": [2], "fn": [3], "tn": [5]}), ["f1", "f1s"]
    )
    assert np.isnan(result["value"].iloc[0]) and result["value"].iloc[1] == 0.0


def test_numerator_and_denominator_are_carried():
    """It carries the counts behind each value."""
    result = compute_metrics(
        pd.DataFrame({"tp": [3], "fp": [1], "fn": [2], "tn": [4]}), ["tpr", "acc"]
    )
    assert result[["numerator", "denominator"]].to_numpy().tolist() == [[3, 5], [7, 10]]


def test_float_counts_and_synonyms():
    """It accepts smoothed (float) counts and metric synonyms."""
    counts = pd.DataFrame({"tp": [2.5], "fp": [0.5], "fn": [1.0], "tn": [6.0]})
    result = compute_metrics(counts, ["recall", "precision"])
    assert list(result["metric"]) == ["tpr", "ppv"]
    assert result["value"].tolist() == pytest.approx([2.5 / 3.5, 2.5 / 3.0])


def test_unknown_metric_is_rejected():
    """It rejects unknown metric names with the list of known ones."""
    with pytest.raises(ValueError, match="unknown metric 'fairness'"):
        canonical_metric("fairness")


def test_prevalence_threshold_is_stable_for_counts_near_a_billion():
    """It gives PT to 1e-12 relative to a 60-digit decimal evaluation of the textbook formula
    where TPR and FPR differ in the ninth digit (the textbook form in floats loses them)."""
    from decimal import Decimal, getcontext

    getcontext().prec = 60
    cases = [
        (1_000_000_001, 999_999_999, 999_999_999, 1_000_000_001),
        (999_999_000, 1_000_000_000, 1_000, 999_000),
        (3, 1_000_000_000, 999_999_997, 1),
    ]
    counts = pd.DataFrame(cases, columns=["tp", "fp", "fn", "tn"])
    value = compute_metrics(counts, ["pt"])["value"].to_numpy()
    for (tp, fp, fn, tn), got in zip(cases, value):
        tpr, fpr = Decimal(tp) / Decimal(tp + fn), Decimal(fp) / Decimal(fp + tn)
        expected = ((tpr * fpr).sqrt() - fpr) / (tpr - fpr)
        assert got == pytest.approx(float(expected), rel=1e-12)
    equal = pd.DataFrame(
        [(10**9, 2 * 10**9, 10**9, 2 * 10**9 + 0)], columns=["tp", "fp", "fn", "tn"]
    )
    row = compute_metrics(equal, ["pt"]).iloc[0]  # TPR = FPR = 1/2 exactly
    assert np.isnan(row["value"]) and row["undefined_reason"] == "tpr = fpr"
