"""Population base rates are context, never tested as bias; every metric is named in words.

The audit here: two groups whose outcome base rates differ strongly (20% and 70% positive) and a
model that treats them exactly alike on errors (TPR 0.8 and FPR 0.1 in both, from fixed counts).
"""

import math
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

import biasaudit
from biasaudit.schemas.metric_ids import GLOSSARY, METRIC_IDS, TWO_GROUP, canonical_metric
from biasaudit.tasks.metrics import compute_metrics
from biasaudit.tasks.monitor import monitored_metrics

AS_OF = datetime(2026, 3, 1, tzinfo=UTC)
# (tp, fp, fn, tn) per group: prevalence 2,000/10,000 and 7,000/10,000; TPR 0.8, FPR 0.1 in both.
CELLS = {"a": (1600, 800, 400, 7200), "b": (5600, 300, 1400, 2700)}
BASE_RATES = {"prev", "nprev"}
ERROR_RATES = {"tpr", "fnr", "fpr", "tnr"}


def fair_frame() -> pd.DataFrame:
    rows = []
    for group, (tp, fp, fn, tn) in CELLS.items():
        for y_true, y_pred, k in ((1, 1, tp), (0, 1, fp), (1, 0, fn), (0, 0, tn)):
            rows += [(group, float(y_true), y_pred)] * k
    frame = pd.DataFrame(rows, columns=["grp", "y_true", "y_pred"])
    return frame.assign(
        prediction_id=[f"p{i}" for i in range(len(frame))],
        model_id="m",
        model_version="1",
        predicted_at=AS_OF - timedelta(days=1),
    )


@pytest.fixture(scope="module")
def result():
    return biasaudit.audit_frame(fair_frame(), attributes=["grp"], bootstrap_replicates=100)


def test_prevalence_is_kept_per_group_but_never_tested(result):
    """Prevalence keeps its per-group values (0.2, 0.7) but enters no test: not planning,
    detection, MATCH or meta-metrics, and not the flagged findings or the run summary."""
    metrics = result.metrics[result.metrics["subset"] == "group"]
    prev = metrics[metrics["metric"] == "prev"].set_index("group_name")["value"]
    assert prev.to_dict() == pytest.approx({"a": 0.2, "b": 0.7})
    for stage in ("planning", "detection", "match", "metametrics"):
        frame = getattr(result, stage)
        assert not frame.empty, stage
        assert BASE_RATES.isdisjoint(frame["metric"]), stage
    assert BASE_RATES.isdisjoint(result.flagged()["metric"])
    assert not any(" prev " in line or " nprev " in line for line in result.summary["flagged"])
    # the model is fair on error rates: nothing about them is flagged either
    assert ERROR_RATES.isdisjoint(result.flagged()["metric"])
    assert {"tpr", "fpr"} <= set(result.detection["metric"])  # still tested


def test_prevalence_is_never_monitored():
    """Monitoring tests rates between groups too: it leaves the base rates out."""
    assert monitored_metrics(["prev", "fpr", "nprev"]) == ["fpr"]
    with pytest.raises(ValueError, match="prevalence"):
        monitored_metrics(["prevalence"])


def test_every_metric_has_a_name_the_configuration_accepts_and_a_formula_that_computes_it():
    """Each metric's name is one of its synonyms, and its formula, evaluated on a confusion
    matrix with unlabelled predictions, gives the catalogue's value."""
    assert list(GLOSSARY) == list(METRIC_IDS)
    assert all(canonical_metric(name) == metric for metric, (name, _) in GLOSSARY.items())
    tp, fp, fn, tn, up, un = 7, 3, 2, 11, 4, 5
    cells = {"tp": tp, "fp": fp, "fn": fn, "tn": tn, "unlabelled_pos": up, "unlabelled_neg": un}
    counts = pd.DataFrame({c: [k] for c, k in cells.items()})
    values = compute_metrics(counts).set_index("metric")["value"]
    names = {
        "TP": tp, "FP": fp, "FN": fn, "TN": tn, "n": tp + fp + fn + tn, "UP": up, "UN": un,
        "TPR": tp / (tp + fn), "FPR": fp / (fp + tn), "PPV": tp / (tp + fp), "sqrt": math.sqrt,
    }  # fmt: skip
    for metric, (_, formula) in GLOSSARY.items():
        if metric in TWO_GROUP:
            continue
        text = formula.replace("unlabelled positive", "UP").replace("unlabelled negative", "UN")
        value = eval(text.replace("unlabelled", "(UP + UN)"), {"__builtins__": {}}, names)
        assert value == pytest.approx(values[metric], rel=1e-12), metric
