"""SQLAlchemy 2 typed models: the prediction source, versioned audit runs and their results.

A run and its result rows are written in one transaction (``db.store.runs.save_run``); readers see a
run only once it has committed. Every result table hangs off ``audit_runs.id``.
"""

from __future__ import annotations

import math
import sys
from datetime import UTC, datetime
from typing import Any, ClassVar, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from biasaudit.schemas.names import StoreLimits

Json = JSON().with_variant(JSONB(), "postgresql")
# SQLite only auto-increments an INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")


_CONVERTING = frozenset({"mysql", "mariadb"})  # the dialects where Moment and Real convert values


class _ConvertedOnMariaDB(TypeDecorator):
    """A type whose values are converted on MariaDB/MySQL only. Elsewhere both conversions are the
    identity, so the values go through the driver's own processing alone, not through a Python
    call per value that returns it unchanged (a report reads ~100,000 doubles, a 10M audit stores
    ~75,000)."""

    cache_ok = True

    def bind_processor(self, dialect):
        if dialect.name in _CONVERTING:
            return super().bind_processor(dialect)
        return self.impl_instance.bind_processor(dialect)

    def result_processor(self, dialect, coltype):
        if dialect.name in _CONVERTING:
            return super().result_processor(dialect, coltype)
        return self.impl_instance.result_processor(dialect, coltype)


class Moment(_ConvertedOnMariaDB):
    """A moment in time with its zone. MariaDB/MySQL have no such type: there it is a DATETIME
    with microseconds (fsp 6) holding UTC, written from any aware datetime (pandas Timestamps
    included) and read back as aware UTC, as PostgreSQL returns it."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect):
        if dialect.name in {"mysql", "mariadb"}:
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value, dialect):
        if value is None or dialect.name not in {"mysql", "mariadb"}:
            return value
        if hasattr(value, "to_pydatetime"):
            value = value.to_pydatetime()
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        year, month, day, hour, minute, second = value.timetuple()[:6]
        return datetime(year, month, day, hour, minute, second, value.microsecond)

    def process_result_value(self, value, dialect):
        if value is None or dialect.name not in {"mysql", "mariadb"} or value.tzinfo is not None:
            return value
        return value.replace(tzinfo=UTC)

# MariaDB/MySQL compare text without case and trailing spaces by default, and cap a key at 3072
# bytes (768 utf8mb4 characters): key text there is exact (binary, no padding) and shorter.
EXACT = "utf8mb4_nopad_bin"


def KeyText(length: int, mariadb_length: int | None = None):
    """Text of a key: String(length), on MariaDB/MySQL exact and at most ``mariadb_length``."""
    return String(length).with_variant(
        mysql.VARCHAR(mariadb_length or length, collation=EXACT), "mysql", "mariadb"
    )



class Real(_ConvertedOnMariaDB):
    """A double on every database. MariaDB/MySQL store neither infinities nor NaN: there an
    infinity is kept as the largest double of its sign (read back as the infinity) and NaN as
    NULL."""

    impl = Float
    cache_ok = True

    def load_dialect_impl(self, dialect):
        if dialect.name in {"mysql", "mariadb"}:
            return dialect.type_descriptor(mysql.DOUBLE(asdecimal=False))  # floats, not Decimals
        return dialect.type_descriptor(Float())

    def process_bind_param(self, value, dialect):
        if value is None or dialect.name not in {"mysql", "mariadb"}:
            return value
        value = float(value)
        if math.isnan(value):
            return None
        return math.copysign(sys.float_info.max, value) if math.isinf(value) else value

    def process_result_value(self, value, dialect):
        if value is None or dialect.name not in {"mysql", "mariadb"}:
            return value
        return math.copysign(math.inf, value) if abs(value) == sys.float_info.max else value


# Longest attribute, group and reference names a MariaDB/MySQL audit store keeps (key limit).
MARIADB_ATTRIBUTE_CHARS = 128
MARIADB_GROUP_CHARS = 255



class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )
    type_annotation_map: ClassVar = {dict[str, Any]: Json}


class RunResult:
    """Key columns of every per-group result table: the run and the (attribute, group)."""

    run_id: Mapped[int] = mapped_column(
        ForeignKey("audit_runs.id", ondelete="CASCADE"), primary_key=True
    )
    attribute: Mapped[str] = mapped_column(
        KeyText(256, MARIADB_ATTRIBUTE_CHARS), primary_key=True
    )
    group_name: Mapped[str] = mapped_column(
        KeyText(512, MARIADB_GROUP_CHARS), primary_key=True
    )


class GroupVsReference(RunResult):
    """Key columns of a result comparing a group with a reference ('rest' or a named group)."""

    reference: Mapped[str] = mapped_column(
        KeyText(512, MARIADB_GROUP_CHARS), primary_key=True
    )
    metric: Mapped[str] = mapped_column(String(16), primary_key=True)


class Prediction(Base):
    """The default audit source: one row per prediction of a deployed model."""

    __tablename__ = "predictions"
    __table_args__ = (
        UniqueConstraint("model_id", "prediction_id", name="model_prediction"),
        Index("ix_predictions_model_time", "model_id", "predicted_at"),
        CheckConstraint("y_true IN (0, 1)", name="y_true_binary"),
        CheckConstraint("y_pred IN (0, 1)", name="y_pred_binary"),
        CheckConstraint("score >= 0 AND score <= 1", name="score_unit_interval"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    prediction_id: Mapped[str] = mapped_column(KeyText(128))
    model_id: Mapped[str] = mapped_column(KeyText(128))
    model_version: Mapped[str] = mapped_column(String(64))
    predicted_at: Mapped[datetime] = mapped_column(Moment)
    y_true: Mapped[int | None] = mapped_column(SmallInteger)
    y_pred: Mapped[int] = mapped_column(SmallInteger)
    score: Mapped[float | None] = mapped_column(Real)
    # Sensitive attributes by name, e.g. {"race": "Black", "sex": "Female"}.
    attributes: Mapped[dict[str, Any]] = mapped_column(Json)


class AuditRun(Base):
    """One audit of one model: its window, row accounting, configuration, fingerprint and
    outcome."""

    __tablename__ = "audit_runs"
    __table_args__ = (
        UniqueConstraint("audit_name", "model_id", "version", name="audit_model_version"),
        Index("ix_audit_runs_lookup", "audit_name", "model_id", "status"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    audit_name: Mapped[str] = mapped_column(String(128))
    model_id: Mapped[str] = mapped_column(String(128))
    model_version: Mapped[str | None] = mapped_column(String(64))
    # 1, 2, ... per (audit, model) for succeeded runs; NULL for failed ones.
    version: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    as_of: Mapped[datetime] = mapped_column(Moment)
    window_start: Mapped[datetime | None] = mapped_column(Moment)
    window_end: Mapped[datetime] = mapped_column(Moment)
    rows_read: Mapped[int] = mapped_column(BigInteger, default=0)
    rows_valid: Mapped[int] = mapped_column(BigInteger, default=0)
    rows_quarantined: Mapped[int] = mapped_column(BigInteger, default=0)
    rows_unlabelled: Mapped[int] = mapped_column(BigInteger, default=0)
    config: Mapped[dict[str, Any]] = mapped_column(Json)
    config_hash: Mapped[str] = mapped_column(String(64))
    input_fingerprint: Mapped[str | None] = mapped_column(String(64))
    code_version: Mapped[str] = mapped_column(String(32))
    flow_run_id: Mapped[str | None] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(Moment)
    finished_at: Mapped[datetime] = mapped_column(Moment)
    # Renewed every few seconds while the run is going (db.store.runs.RunLease); a silent one is
    # dead.
    heartbeat_at: Mapped[datetime | None] = mapped_column(Moment)
    timings: Mapped[dict[str, Any]] = mapped_column(Json)
    summary: Mapped[dict[str, Any]] = mapped_column(Json)
    error: Mapped[str | None] = mapped_column(Text)


class GroupCount(RunResult, Base):
    """Confusion counts of one group (``subset='group'``) or its rest of population (``'rest'``)."""

    __tablename__ = "group_counts"

    subset: Mapped[str] = mapped_column(String(8), primary_key=True)
    tp: Mapped[int] = mapped_column(BigInteger)
    fp: Mapped[int] = mapped_column(BigInteger)
    fn: Mapped[int] = mapped_column(BigInteger)
    tn: Mapped[int] = mapped_column(BigInteger)
    n_unlabelled: Mapped[int] = mapped_column(BigInteger)
    # the unlabelled predictions by decision (y_pred 1 / 0); NULL in runs before migration 0009
    unlabelled_pos: Mapped[int | None] = mapped_column(BigInteger)
    unlabelled_neg: Mapped[int | None] = mapped_column(BigInteger)


class MetricResult(RunResult, Base):
    """One metric of one group or complement; NaN-free: an undefined value is NULL with its
    reason."""

    __tablename__ = "metric_results"

    subset: Mapped[str] = mapped_column(String(8), primary_key=True)
    metric: Mapped[str] = mapped_column(String(16), primary_key=True)
    # 'raw' for the observed counts; smoothing stages add their own estimators.
    estimator: Mapped[str] = mapped_column(String(16), primary_key=True)
    value: Mapped[float | None] = mapped_column(Real)
    numerator: Mapped[float | None] = mapped_column(Real)
    denominator: Mapped[float | None] = mapped_column(Real)
    # every condition that leaves the value undefined, joined: of any length (migration 0013)
    undefined_reason: Mapped[str | None] = mapped_column(Text)


class QuarantinedRow(Base):
    """A row that failed validation, kept whole with the rule it broke. Nothing is dropped
    silently."""

    __tablename__ = "quarantined_rows"
    __table_args__ = (Index("ix_quarantined_rows_run", "run_id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("audit_runs.id", ondelete="CASCADE"))
    source: Mapped[str] = mapped_column(String(512))
    # Position of the row in the extracted window (or loaded file), and its prediction id.
    row_number: Mapped[int | None] = mapped_column(BigInteger)
    row_ref: Mapped[str] = mapped_column(String(128))
    column_name: Mapped[str | None] = mapped_column(String(128))
    value: Mapped[str | None] = mapped_column(Text)
    rule: Mapped[str] = mapped_column(String(256))
    row: Mapped[dict[str, Any]] = mapped_column(Json)
    created_at: Mapped[datetime] = mapped_column(Moment)


class MatchResult(GroupVsReference, Base):
    """MATCH test of one group and metric against a reference ('rest' or a named group)."""

    __tablename__ = "match_results"

    # the group's predictions the MATCH distribution draws: labelled ones, every valid one for
    # PPR and PNR (the rate's denominator)
    predictions_group: Mapped[int] = mapped_column(BigInteger)
    percentile: Mapped[float | None] = mapped_column(Real)
    percentile_approx: Mapped[float | None] = mapped_column(Real)
    p_value: Mapped[float | None] = mapped_column(Real)
    # Benjamini-Hochberg across the run's MATCH tests
    p_adjusted: Mapped[float | None] = mapped_column(Real)
    # 'exact', or the approximation ('normal', 'beta') used above the exact-sum size limit
    method: Mapped[str | None] = mapped_column(String(8))
    # why there is no p-value (undefined metric, reference too small, min_group_size, repeat)
    reason: Mapped[str | None] = mapped_column(Text)


class TwoGroupResult(GroupVsReference, Base):
    """A two-group metric (OFI, treatment equality) of one group against a reference."""

    __tablename__ = "two_group_results"

    value: Mapped[float | None] = mapped_column(Real)
    undefined_reason: Mapped[str | None] = mapped_column(Text)


class DetectionResult(GroupVsReference, Base):
    """Detection of one rate metric of one group against a reference (tasks.detection.detect)."""

    __tablename__ = "detection_results"

    # the rate's counts x/d in the group and in the reference
    numerator_group: Mapped[float | None] = mapped_column(Real)
    denominator_group: Mapped[float | None] = mapped_column(Real)
    numerator_reference: Mapped[float | None] = mapped_column(Real)
    denominator_reference: Mapped[float | None] = mapped_column(Real)
    difference: Mapped[float | None] = mapped_column(Real)
    mean: Mapped[float | None] = mapped_column(Real)
    sd: Mapped[float | None] = mapped_column(Real)
    direction: Mapped[str | None] = mapped_column(String(8))
    prob_deviation: Mapped[float | None] = mapped_column(Real)
    hdi_low: Mapped[float | None] = mapped_column(Real)
    hdi_high: Mapped[float | None] = mapped_column(Real)
    # the HDI's mass 1 − alpha/m over the run's m tested rows (Bonferroni); NULL in runs before
    # migration 0019, whose HDIs held 1 − alpha each and whose decisions were unadjusted
    hdi_mass: Mapped[float | None] = mapped_column(Real)
    # HDI + ROPE and the simple rule at that mass, on tested rows only (NULL and 0 elsewhere)
    decision: Mapped[str | None] = mapped_column(String(16))
    simple_rule: Mapped[int] = mapped_column(SmallInteger)
    z: Mapped[float | None] = mapped_column(Real)
    p_value: Mapped[float | None] = mapped_column(Real)
    p_adjusted: Mapped[float | None] = mapped_column(Real)
    # 'exact' (Berger-Boos, tasks.twosample); runs before it may hold 'normal' (large counts)
    test: Mapped[str | None] = mapped_column(String(8))
    flagged: Mapped[bool] = mapped_column(Boolean)
    # the test's settings: H1 |difference| > tolerance, flagged at false-discovery rate alpha
    tolerance: Mapped[float] = mapped_column(Real)
    alpha: Mapped[float] = mapped_column(Real)
    # why there is no test (zero denominator, min_group_size, repeat of a two-valued comparison)
    reason: Mapped[str | None] = mapped_column(Text)


class PlanningResult(GroupVsReference, Base):
    """Sample size needed vs available for one rate metric of one comparison
    (tasks.planning.plan)."""

    __tablename__ = "planning_results"

    value_group: Mapped[float | None] = mapped_column(Real)
    value_reference: Mapped[float | None] = mapped_column(Real)
    difference: Mapped[float | None] = mapped_column(Real)
    ratio: Mapped[float | None] = mapped_column(Real)
    tau: Mapped[float | None] = mapped_column(Real)
    # valid predictions of the group and the reference, and the rate's denominators
    size_group: Mapped[float] = mapped_column(Real)
    size_reference: Mapped[float] = mapped_column(Real)
    denominator_group: Mapped[float | None] = mapped_column(Real)
    denominator_reference: Mapped[float | None] = mapped_column(Real)
    # the multiplicity-adjusted level at which detection's test is planned (α/m)
    level: Mapped[float | None] = mapped_column(Real)
    needed: Mapped[float | None] = mapped_column(Real)
    needed_neyman: Mapped[float | None] = mapped_column(Real)
    neyman_share_group: Mapped[float | None] = mapped_column(Real)
    achieved_power: Mapped[float | None] = mapped_column(Real)
    # 'exact' (the exact test's rejection region) or 'limit' (its normal limit, where checked
    # within 0.005 of it: tasks.planning.detection_power); runs before it may hold 'normal'
    power_method: Mapped[str | None] = mapped_column(String(8))
    verdict: Mapped[str] = mapped_column(String(64))
    bias_n: Mapped[float | None] = mapped_column(Real)
    # the planned test's tolerance and the run's alpha (level is alpha/m)
    tolerance: Mapped[float] = mapped_column(Real)
    alpha: Mapped[float] = mapped_column(Real)
    reason: Mapped[str | None] = mapped_column(Text)


class MetaMetricResult(Base):
    """Meta-metrics of one attribute (or intersection) and rate metric across its groups."""

    __tablename__ = "metametric_results"

    run_id: Mapped[int] = mapped_column(
        ForeignKey("audit_runs.id", ondelete="CASCADE"), primary_key=True
    )
    attribute: Mapped[str] = mapped_column(
        KeyText(256, MARIADB_ATTRIBUTE_CHARS), primary_key=True
    )
    metric: Mapped[str] = mapped_column(String(16), primary_key=True)
    k: Mapped[int] = mapped_column(Integer)
    k_undefined: Mapped[int] = mapped_column(Integer)
    # the smallest, median and largest rate denominators of the groups kept
    denominator_min: Mapped[float | None] = mapped_column(Real)
    denominator_median: Mapped[float | None] = mapped_column(Real)
    denominator_max: Mapped[float | None] = mapped_column(Real)
    mm_diff: Mapped[float | None] = mapped_column(Real)
    mm_ratio: Mapped[float | None] = mapped_column(Real)
    max_abs_diff: Mapped[float | None] = mapped_column(Real)
    mad: Mapped[float | None] = mapped_column(Real)
    var: Mapped[float | None] = mapped_column(Real)
    gei: Mapped[float | None] = mapped_column(Real)
    corrected_var: Mapped[float | None] = mapped_column(Real)
    interval_low: Mapped[float | None] = mapped_column(Real)
    interval_high: Mapped[float | None] = mapped_column(Real)
    # the interval's confidence level (1 - alpha)
    confidence: Mapped[float] = mapped_column(Real)
    # groups left out and values left undefined, with why
    reason: Mapped[str | None] = mapped_column(Text)


class ComparisonResult(RunResult, Base):
    """Change of one group metric since the previous version of the audit (tasks.compare)."""

    __tablename__ = "comparison_results"

    metric: Mapped[str] = mapped_column(String(16), primary_key=True)
    previous_run_id: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16))
    value_before: Mapped[float | None] = mapped_column(Real)
    value_after: Mapped[float | None] = mapped_column(Real)
    change: Mapped[float | None] = mapped_column(Real)
    p_value: Mapped[float | None] = mapped_column(Real)
    p_adjusted: Mapped[float | None] = mapped_column(Real)
    significant: Mapped[bool] = mapped_column(Boolean)
    # The two runs' windows share data: changes reported, not tested (dependent samples).
    overlapping: Mapped[bool | None] = mapped_column(Boolean)
    # the test's settings: H1 |change| > tolerance (always 0), significant at FDR alpha
    tolerance: Mapped[float] = mapped_column(Real)
    alpha: Mapped[float] = mapped_column(Real)


class MonitorResult(GroupVsReference, Base):
    """One monitored comparison after one run's increment (tasks.monitor): the increment's
    counts, its e-value, the running e-process and confidence sequence, the alarms, and the
    state the next run continues from."""

    __tablename__ = "monitor_results"

    numerator_group: Mapped[float] = mapped_column(Real)
    denominator_group: Mapped[float] = mapped_column(Real)
    numerator_reference: Mapped[float] = mapped_column(Real)
    denominator_reference: Mapped[float] = mapped_column(Real)
    unlabelled_group: Mapped[float] = mapped_column(Real)
    unlabelled_reference: Mapped[float] = mapped_column(Real)
    pairs: Mapped[float] = mapped_column(Real)
    difference: Mapped[float | None] = mapped_column(Real)
    e_value_up: Mapped[float] = mapped_column(Real)
    e_value_down: Mapped[float] = mapped_column(Real)
    e_value: Mapped[float] = mapped_column(Real)
    e_process: Mapped[float] = mapped_column(Real)
    crossed: Mapped[bool] = mapped_column(Boolean)
    alarm: Mapped[bool] = mapped_column(Boolean)
    cs_low: Mapped[float] = mapped_column(Real)
    cs_high: Mapped[float] = mapped_column(Real)
    nights: Mapped[float] = mapped_column(Real)
    # State (schemas.results.MONITOR_STATE other than nights, cs_low, cs_high).
    log_m_up: Mapped[float] = mapped_column(Real)
    log_m_down: Mapped[float] = mapped_column(Real)
    w_k: Mapped[float] = mapped_column(Real)
    w_d: Mapped[float] = mapped_column(Real)
    w_v: Mapped[float] = mapped_column(Real)
    cusum_up: Mapped[float] = mapped_column(Real, server_default="0")
    cusum_down: Mapped[float] = mapped_column(Real, server_default="0")
    run_y_up: Mapped[float] = mapped_column(Real, server_default="0")
    run_y_down: Mapped[float] = mapped_column(Real, server_default="0")
    run_q_up: Mapped[float] = mapped_column(Real, server_default="0")
    run_q_down: Mapped[float] = mapped_column(Real, server_default="0")
    gate_up: Mapped[float] = mapped_column(Real, server_default="0")
    gate_down: Mapped[float] = mapped_column(Real, server_default="0")
    n_pairs: Mapped[float] = mapped_column(Real)
    s_d: Mapped[float] = mapped_column(Real)
    s_v: Mapped[float] = mapped_column(Real)
    cs_a: Mapped[float] = mapped_column(Real)
    cs_b: Mapped[float] = mapped_column(Real)
    cs_c: Mapped[float] = mapped_column(Real)
    cs_dq: Mapped[float] = mapped_column(Real)
    cs_eq: Mapped[float] = mapped_column(Real)
    ebh_weight: Mapped[float] = mapped_column(Real, server_default="0")
    # The increment this run consumed: (previous_as_of, as_of] and the previous run continued.
    previous_run_id: Mapped[int | None] = mapped_column(BigInteger)
    previous_as_of: Mapped[datetime | None] = mapped_column(Moment)
    # the monitor's settings: H1 |difference| > tolerance, crossed at 1/alpha, alarms by e-BH at
    # alpha
    tolerance: Mapped[float] = mapped_column(Real)
    alpha: Mapped[float] = mapped_column(Real)


class ScoreResult(RunResult, Base):
    """A score audit's comparison of a group with its reference (tasks.scores.score_comparisons):
    AUC with its interval, Cox recalibration, and the tests of equal AUC and equal calibration."""

    __tablename__ = "score_results"

    reference: Mapped[str] = mapped_column(KeyText(512, MARIADB_GROUP_CHARS), primary_key=True)
    n_group: Mapped[int] = mapped_column(BigInteger)
    positives_group: Mapped[int] = mapped_column(BigInteger)
    negatives_group: Mapped[int] = mapped_column(BigInteger)
    auc_group: Mapped[float | None] = mapped_column(Real)
    auc_variance_group: Mapped[float | None] = mapped_column(Real)
    auc_low_group: Mapped[float | None] = mapped_column(Real)
    auc_high_group: Mapped[float | None] = mapped_column(Real)
    in_the_large_group: Mapped[float | None] = mapped_column(Real)
    slope_group: Mapped[float | None] = mapped_column(Real)
    n_reference: Mapped[int] = mapped_column(BigInteger)
    positives_reference: Mapped[int] = mapped_column(BigInteger)
    negatives_reference: Mapped[int] = mapped_column(BigInteger)
    auc_reference: Mapped[float | None] = mapped_column(Real)
    auc_variance_reference: Mapped[float | None] = mapped_column(Real)
    auc_low_reference: Mapped[float | None] = mapped_column(Real)
    auc_high_reference: Mapped[float | None] = mapped_column(Real)
    in_the_large_reference: Mapped[float | None] = mapped_column(Real)
    slope_reference: Mapped[float | None] = mapped_column(Real)
    auc_p_value: Mapped[float | None] = mapped_column(Real)
    calibration_statistic: Mapped[float | None] = mapped_column(Real)
    calibration_p_value: Mapped[float | None] = mapped_column(Real)
    auc_p_adjusted: Mapped[float | None] = mapped_column(Real)
    calibration_p_adjusted: Mapped[float | None] = mapped_column(Real)
    confidence: Mapped[float] = mapped_column(Real)


class CalibrationResult(RunResult, Base):
    """Calibration within a group: one score bin's outcome rate, mean score and exact interval."""

    __tablename__ = "calibration_results"

    score_bin: Mapped[float] = mapped_column(Real, primary_key=True)
    # the bin's predictions with a known outcome, and the positives among them
    labelled: Mapped[int] = mapped_column(BigInteger)
    positives: Mapped[int] = mapped_column(BigInteger)
    mean_score: Mapped[float | None] = mapped_column(Real)
    observed_rate: Mapped[float | None] = mapped_column(Real)
    rate_low: Mapped[float | None] = mapped_column(Real)
    rate_high: Mapped[float | None] = mapped_column(Real)
    confidence: Mapped[float] = mapped_column(Real)


class ThresholdResult(RunResult, Base):
    """The decision score >= threshold at one bin edge of a group: counts and rates."""

    __tablename__ = "threshold_results"

    threshold: Mapped[float] = mapped_column(Real, primary_key=True)
    n: Mapped[int] = mapped_column(BigInteger)
    selected: Mapped[int] = mapped_column(BigInteger)
    tp: Mapped[int] = mapped_column(BigInteger)
    fp: Mapped[int] = mapped_column(BigInteger)
    fn: Mapped[int] = mapped_column(BigInteger)
    tn: Mapped[int] = mapped_column(BigInteger)
    selection_rate: Mapped[float | None] = mapped_column(Real)
    tpr: Mapped[float | None] = mapped_column(Real)
    fpr: Mapped[float | None] = mapped_column(Real)
    fnr: Mapped[float | None] = mapped_column(Real)


class ScoringResult(RunResult, Base):
    """Local Law 144's scoring rate of a group: its rows and those scoring strictly above the
    median of the sample's ``sample_size`` scores (tasks.ll144)."""

    __tablename__ = "scoring_results"

    n: Mapped[int] = mapped_column(BigInteger)
    above_median: Mapped[int] = mapped_column(BigInteger)
    median_score: Mapped[float] = mapped_column(Real)
    sample_size: Mapped[int] = mapped_column(BigInteger)


def store_limits(dialect: Dialect) -> StoreLimits:
    """What a result store of ``dialect`` holds of names, read from the key columns above: the
    shortest group_name/reference and attribute column as the dialect types them (SQLite
    enforces no declared length), and NUL everywhere but PostgreSQL (its text cannot hold it)."""

    def chars(*names: str) -> int | None:
        if dialect.name == "sqlite":
            return None
        lengths = [
            cast(String, table.c[name].type.dialect_impl(dialect)).length
            for table in Base.metadata.tables.values()
            for name in names
            if name in table.c
        ]
        return min((n for n in lengths if n is not None), default=None)  # None: unbounded

    return StoreLimits(
        group_chars=chars("group_name", "reference"),
        attribute_chars=chars("attribute"),
        nul=dialect.name != "postgresql",
    )
