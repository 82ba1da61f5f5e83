"""Population base rates are context, never tested as bias; every metric is named in words.

The audit here: two groups whose outcome base rates differ strongly (20% and 70% positive) and a
model that treats them exactly alike on errors (TPR 0.8 and FPR 0.1 in both, from fixed counts).
"""

import dataclasses
import math
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from typer.testing import CliRunner

import biasaudit
from biasaudit.db.engine import make_engine
from biasaudit.db.store.history import flagged_detections
from biasaudit.db.store.load import load_predictions
from biasaudit.db.store.migrate import upgrade
from biasaudit.db.store.report_data import report_frames
from biasaudit.flows.cli import app
from biasaudit.flows.pipeline import run_audit
from biasaudit.flows.report import build_report
from biasaudit.schemas.metric_ids import GLOSSARY, METRIC_IDS, TWO_GROUP, canonical_metric
from biasaudit.tasks.metrics import compute_metrics
from biasaudit.tasks.monitor import monitored_metrics
from biasaudit.tasks.report import render_html, verdicts

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


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    folder = tmp_path_factory.mktemp("base-rates")
    url = f"sqlite:///{folder / 'fair.db'}"
    upgrade(url)
    load_predictions(make_engine(url), fair_frame(), ["grp"], "fair")
    config = folder / "fair.toml"
    config.write_text(
        '[[audits]]\nname = "fair"\nmodel = "m"\nattributes = ["grp"]\n'
        "[audits.thresholds]\nbootstrap_replicates = 100\n"
    )
    run_id = run_audit("fair", str(config), url, AS_OF)["run_id"]
    return {"url": url, "run_id": run_id, "engine": make_engine(url)}


def test_report_shows_prevalence_as_context_and_names_every_metric(stored):
    """The report shows each group's prevalence beside the groups, flags nothing about it, and
    names every metric in words with its formula beside its id."""
    page, markdown = build_report(stored["engine"], stored["run_id"])[:2]
    first = page.split('<hr class="fold">')[0]
    assert "PREV" not in first and "prevalence" not in first.split("Flagged comparisons")[1]
    assert "prevalence" in page and "(TP + FN) / n" in page
    assert "false positive rate" in page and "FP / (FP + TN)" in page
    assert "20.0%" in page and "70.0%" in page  # each group's base rate, shown
    for words in ("true positive rate", "TP / (TP + FN)", "accuracy", "(TP + TN) / n"):
        assert words in page, words
    # the markdown first screen names the metrics of its flagged findings (PPR differs with the
    # base rate: 24% and 59% of each group selected), and no base rate is among them
    assert "PREV" not in markdown and "prevalence" not in markdown
    assert "PPR" in markdown and "predicted positive rate" in markdown


def test_a_run_stored_when_base_rates_were_tested_shows_no_base_rate_finding(stored):
    """Runs stored before base rates became context hold flagged tests of them: the report's
    verdicts and findings and the command line's flagged list leave those out."""
    frames = report_frames(stored["engine"], stored["run_id"])
    detection = frames.detection
    tested = detection[detection["metric"] == "ppr"].assign(metric="prev")  # flagged, as then
    assert tested["flagged"].any()
    older = pd.concat([detection, tested], ignore_index=True)
    older = dataclasses.replace(frames, detection=older)
    assert "PREV" not in render_html(older).split('<hr class="fold">')[0]
    pd.testing.assert_frame_equal(verdicts(older), verdicts(frames))
    pd.testing.assert_frame_equal(
        flagged_detections(older.detection), flagged_detections(detection)
    )


def test_cli_lists_every_metric_and_history_names_them(stored):
    """``biasaudit metrics`` lists every metric in words with its formula; ``history RUN --all``
    shows the base rates beside the groups, names its metrics and flags no base rate."""
    runner = CliRunner()
    listed = runner.invoke(app, ["metrics"])
    assert listed.exit_code == 0, listed.output
    text = " ".join(listed.output.split())
    assert "fpr — false positive rate, FP / (FP + TN)" in text
    assert "prev — prevalence, (TP + FN) / n" in text
    assert "mcc — Matthews correlation coefficient" in text
    shown = runner.invoke(app, ["history", str(stored["run_id"]), "--all", "--db", stored["url"]])
    assert shown.exit_code == 0, shown.output
    output = " ".join(shown.output.split())
    assert "prev — prevalence, (TP + FN) / n" in output
    assert "fpr — false positive rate, FP / (FP + TN)" in output
    assert "base rates" in output and "0.2" in output and "0.7" in output
    flagged = output.split("detection: flagged")[1].split("meta-metrics")[0]
    assert "ppr" in flagged and "prev" not in flagged


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
