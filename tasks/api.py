"""The Python API: audit a pandas DataFrame in a notebook, with the flow's own schema and core.

Example::

    import biasaudit
    result = biasaudit.audit_frame(
        frame, attributes=["race"], reference_groups={"race": "Caucasian"}, tolerance=0.05
    )
    result.detection[result.detection["flagged"]]
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from biasaudit.schemas.config import audit_from_options
from biasaudit.schemas.quarantine import split_valid, unusable_columns
from biasaudit.tasks.core import AuditResult, audit_counts
from biasaudit.tasks.counts import arrival_evidence, completeness_warnings, group_counts
from biasaudit.tasks.ll144 import scoring_rates
from biasaudit.tasks.scores import bins_of_scores, numeric_scores, score_audit, score_counts


def audit_frame(
    frame: pd.DataFrame,
    *,
    attributes: Sequence[str],
    intersections: Sequence[Sequence[str]] = (),
    reference_groups: dict[str, str] | None = None,
    metrics: Sequence[str] | None = None,
    score: str | None = None,
    label_time: str | None = None,
    **options: Any,
) -> AuditResult:
    """Audit the predictions in ``frame`` and return every stage's result frames.

    Parameters
    ----------
    frame : pandas.DataFrame
        One row per prediction: ``y_true`` (0/1, missing where the outcome is unknown),
        ``y_pred`` (0/1), optionally ``score`` in [0, 1], and the ``attributes`` columns;
        ``prediction_id``, ``model_id``, ``model_version`` and ``predicted_at`` are optional
        (the row position, "frame", none and now stand in).
    attributes : sequence of str
        The columns whose groups are compared.
    intersections : sequence of sequences of str, default ()
        Attribute combinations audited as groups of their own (``[["race", "sex"]]``).
    reference_groups : dict of str to str, optional
        A reference group per attribute (or intersection): every other group of it is compared
        with that group too, beside the comparison of every group with its rest.
    metrics : sequence of str, optional
        Metric ids or names (default: the whole catalogue).
    score : str, optional
        A numeric column (e.g. ``"decile_score"``) audited itself (tasks.scores):
        ``result.scores`` (AUC and calibration per group against its reference),
        ``result.calibration`` (outcome rate per score bin), ``result.thresholds`` (error and
        selection rates at every bin edge) and ``result.scoring`` (Local Law 144: each group's
        rows above the median of every finite score of the frame, rows of an unknown category
        included).
    label_time : str, optional
        A column of when each label arrived (missing where it has not): the label-completeness
        warnings (``result.summary["label_completeness_warnings"]``) then say what the arrival
        times tell of labels missing by outcome or by decision (tasks.counts.arrival_evidence)
        instead of only that labelled rows cannot tell them apart.
    **options
        The audit configuration's own keys, with the TOML file's defaults (``tolerance``,
        ``alpha``, ``power``, ``bootstrap_replicates``, ``cps_lambda``, ...).

    Returns
    -------
    AuditResult
        Every stage's frame, each with the columns of its result table (docs/python-api.md).
        Rows that fail the predictions schema are not audited: they are in
        ``result.quarantine``, with the column and the rule they broke.

    Warns
    -----
    UserWarning
        When rows failed the predictions schema: how many, and which columns.
    """
    audit = audit_from_options(
        attributes=list(attributes),
        intersections=[list(i) for i in intersections],
        reference_groups=reference_groups,
        metrics=None if metrics is None else list(metrics),
        **options,
    )
    now = datetime.now(UTC)
    stand_ins = {
        "prediction_id": lambda f: pd.Series(range(len(f)), index=f.index).astype(str),
        "model_id": lambda f: "frame",
        "model_version": lambda f: None,
        "predicted_at": lambda f: now,
        "score": lambda f: np.nan,
    }
    missing = {c: stand_ins[c] for c in stand_ins if c not in frame.columns}
    rows = frame.assign(**missing)
    valid, quarantine = split_valid(rows, audit.attributes, now)
    if len(quarantine):
        bad = quarantine["row_number"].nunique()
        why = unusable_columns(len(rows), quarantine)
        warnings.warn(
            f"{bad} of {len(rows)} rows failed validation and were not audited: "
            f"{why + '; ' if why else ''}see result.quarantine",
            stacklevel=2,
        )
    counts = group_counts(valid, audit.attributes, audit.intersections)
    result = audit_counts(counts, audit)
    frames: dict[str, Any] = {}
    if score is not None:
        if score not in frame.columns:
            raise ValueError(f"score column {score!r} is not in the frame")
        rows = valid.assign(_score=numeric_scores(valid[score], score))
        columns = [[a] for a in audit.attributes] + audit.intersections
        values = rows["_score"].to_numpy()
        # Local Law 144's sample: every finite score of the frame, the rows left out of the
        # tables (an unknown category, another invalid value) included, as the scan's
        # db.sources.cells.window_score_median reads every row of the window
        read = pd.to_numeric(frame[score], errors="coerce").to_numpy(dtype="float64")
        sample = read[np.isfinite(read)]
        median = float(np.median(sample)) if sample.size else float("nan")
        counted = score_counts(rows, columns, np.unique(values), median, score="_score")
        frames = score_audit(
            counted,
            bins_of_scores(values),
            audit.reference_groups,
            confidence=1 - audit.thresholds.alpha,
        )
        frames["scoring"] = scoring_rates(counted, median, int(sample.size))
    if label_time is not None:
        if label_time not in frame.columns:
            raise ValueError(f"label_time column {label_time!r} is not in the frame")
        evidence = arrival_evidence(
            valid.assign(**{label_time: frame.loc[valid.index, label_time]}),
            audit.attributes,
            audit.intersections,
            label_time,
            alpha=audit.thresholds.alpha,
        )
        told = completeness_warnings(result.completeness, evidence)
        frames["summary"] = {**result.summary, "label_completeness_warnings": told}
    return AuditResult(**{**result.__dict__, "quarantine": quarantine, **frames})
