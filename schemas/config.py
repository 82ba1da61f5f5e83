"""The audit configuration: the contract of a TOML file of ``[[audits]]`` and its validation
(reading the file and the environment: flows.config_files).

Example::

    [[audits]]
    name = "credit-race"
    model_id = "credit-scorer"
    source = "predictions"            # any table or view; map its columns below
    window = "last_30_days"           # "all", "last_day" or "last_N_days"
    attributes = ["race", "sex"]
    intersections = [["race", "sex"]]
    metrics = ["tpr", "fpr", "precision", "selection_rate"]
    reference_groups = { race = "White" }
    [audits.columns]                  # canonical name -> source column
    y_true = "label"
    [audits.thresholds]
    max_invalid_fraction = 0.05
    [audits.monitor]                  # optional: anytime-valid monitoring of each run's increment
    label_delay_days = 30             # outcomes count this long after their prediction
    metrics = ["ppr", "tpr", "fpr"]
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from datetime import timedelta
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from biasaudit.schemas.metric_ids import METRIC_IDS, TESTED_RATES, canonical_metric
from biasaudit.schemas.urls import holds_secret

CANONICAL_COLUMNS = (
    "prediction_id",
    "model_id",
    "model_version",
    "predicted_at",
    "y_true",
    "y_pred",
    "score",
    "labelled_at",  # when the label arrived (optional): tells missingness by outcome from decision
)
_WINDOW = re.compile(r"^(all|last_day|last_(\d+)_days)$")
# A window of at most 1,000 years: its start is a date every engine and Python can hold.
MAX_WINDOW_DAYS = 365_000
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
Probability = Annotated[float, Field(gt=0.0, lt=1.0)]
INTERSECTION_SEP = " x "


PlanningPower = Literal["auto", "exact"]  # Thresholds.planning_power (tasks.planning)


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the key and the problem."""


class UnknownReferenceGroup(ConfigError, LookupError):
    """A configured reference group that the audited data does not hold; the message lists the
    groups that it does hold (a LookupError too, as it was before it named them)."""


class Thresholds(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_invalid_fraction: Fraction = 0.05
    # Disparity (difference of rates) within which a group counts as fair (detection's ROPE).
    tolerance: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.05
    alpha: Probability = 0.05
    power: Probability = 0.8
    min_group_size: Annotated[int, Field(ge=0, le=10**12)] = 30
    # A run still 'running' after this long is taken as abandoned (its process died).
    stale_run_hours: Annotated[float, Field(gt=0.0, le=24.0 * 365)] = 6.0
    # Bootstrap replicates of the meta-metric stage's double-corrected variance interval.
    bootstrap_replicates: Annotated[int, Field(ge=100, le=100_000)] = 1000
    # Disparity worth detecting: planning reports the power of detection's test against it
    # (a configured τ > tolerance, never the observed gap, whose power only restates the p-value).
    # None: tolerance + 0.05.
    planning_tau: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    # MATCH runs only where the reference has this many times the group's predictions (its
    # reference rates are estimated; benchmarks/calibration.py chose 50).
    match_reference_ratio: Annotated[float, Field(ge=0.0)] = 50.0
    # Planning's power: 'auto' takes the normal limit where a grid check finds it within 0.005 of
    # the exact power (tasks.planning.detection_power), 'exact' the exact power for every row.
    planning_power: PlanningPower = "auto"

    @model_validator(mode="after")
    def _tau_above_tolerance(self) -> Thresholds:
        if self.planning_tau is not None and self.planning_tau <= self.tolerance:
            raise ValueError(
                f"planning_tau ({self.planning_tau}) must exceed tolerance ({self.tolerance}): "
                "it is the disparity beyond the tolerance that the audit should detect"
            )
        return self

    @property
    def planning_disparity(self) -> float:
        """τ of the planning stage: planning_tau, or 0.05 beyond the tolerance when unset."""
        return self.planning_tau if self.planning_tau is not None else min(1.0, self.tolerance + 0.05)


class Smoothing(BaseModel):
    """Cross-Prior Smoothing weight λ and additive pseudo-count (Briscoe et al., "Algorithmic
    Accountability in Small Data", section 6)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    cps_lambda: Annotated[float, Field(ge=0.0, le=1e6)] = 5.0
    # Pseudo-count added to every cell (1 = add-one); the former key additive_alpha is accepted.
    additive_pseudocount: Annotated[
        float,
        Field(
            ge=0.0,
            le=1e6,
            validation_alias=AliasChoices("additive_pseudocount", "additive_alpha"),
        ),
    ] = 1.0


class Scan(BaseModel):
    """How the window becomes counts: whole in memory, streamed in chunks, or pushed down to the
    database as one GROUP BY (for trusted sources; invalid rows are still found and quarantined)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    mode: Literal["memory", "stream", "pushdown"] = "memory"
    chunk_rows: Annotated[int, Field(ge=1000, le=50_000_000)] = 200_000
    # The user's word that prediction ids are unique per model in the source, for engines that
    # declare no unique constraints (Spark SQL, ClickHouse): the scans then skip the duplicate-id
    # scan, a GROUP BY over every id. Stored with the run's configuration; if it is wrong, a
    # repeated id counts twice.
    ids_unique: bool = False


class Monitor(BaseModel):
    """Anytime-valid monitoring of each run's increment (tasks.monitor): outcomes
    count ``label_delay_days`` after their prediction; the bets' variance estimate forgets with
    ``half_life`` runs."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    label_delay_days: Annotated[float, Field(ge=0.0, le=3650.0)] = 0.0
    metrics: list[str] = ["ppr", "tpr", "fpr"]
    half_life: Annotated[float, Field(gt=0.0, le=3650.0)] = 30.0

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, value: list[str]) -> list[str]:
        names = list(dict.fromkeys(canonical_metric(name) for name in value))
        other = [name for name in names if name not in TESTED_RATES]
        if not names or other:
            raise ValueError(
                f"{other or 'no metric'}: the monitor watches rates of the model's decisions, one "
                f"or more of {', '.join(TESTED_RATES)} (base rates such as prev are context, "
                "never tested)"
            )
        return names


class Decision(BaseModel):
    """The decision derived from a score: predicted positive when ``score`` >= ``threshold``.

    ``score`` is a source column holding numbers (or number text, e.g. a decile ``"7"``). One
    threshold per audit: a run's results have no threshold key, so each threshold is an audit."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    score: Annotated[str, Field(min_length=1)]
    threshold: float

    @field_validator("threshold", mode="before")
    @classmethod
    def _one_threshold(cls, value):
        if isinstance(value, (list, tuple)):  # pydantic reports a ValueError, not a TypeError
            raise ValueError("one threshold per audit; define one audit per threshold")  # noqa: TRY004
        return value


# An identifier longer than this is cut or refused by PostgreSQL (63 bytes) and MariaDB (64).
MAX_IDENTIFIER_BYTES = 63
# The databases' own catalogues: never a source of predictions, and some hold credentials
# (PostgreSQL's pg_shadow, MariaDB's mysql.user, ClickHouse's system.users, Databricks' system
# catalogue). Schemas (every part of a dotted name but the last: a Spark catalogue, then its
# database) compare without case; PostgreSQL resolves an unqualified pg_* name to pg_catalog and
# keeps its own schemas as pg_* (pg_toast), SQLite keeps its own tables as sqlite_*.
CATALOGUE_SCHEMAS = frozenset(
    {"pg_catalog", "information_schema", "mysql", "sys", "performance_schema", "system"}
)
CATALOGUE_PREFIXES = ("pg_", "sqlite_")


class Audit(BaseModel):
    """One audit: which model's predictions, from where, over which window, by which groups."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")]
    # The model's id (``model_id`` in the source and the result tables); ``model`` is accepted too.
    model_id: Annotated[
        str,
        Field(min_length=1, max_length=128, validation_alias=AliasChoices("model_id", "model")),
    ]
    model_version: str | None = None
    source: Annotated[str, Field(min_length=1)] = "predictions"
    # The database holding the source, when it is not the one storing results (a warehouse):
    # a SQLAlchemy URL without password; the password comes from the environment variable
    # named by ``source_db_password_env``.
    source_db: str | None = None
    source_db_password_env: str = "BIASAUDIT_SOURCE_DB_PASSWORD"
    columns: dict[str, str] = {}
    decision: Decision | None = None
    window: str = "all"
    attributes: Annotated[list[str], Field(min_length=1)]
    intersections: list[list[str]] = []
    metrics: list[str] = list(METRIC_IDS)
    reference_groups: dict[str, str] = {}
    thresholds: Thresholds = Thresholds()
    smoothing: Smoothing = Smoothing()
    scan: Scan = Scan()
    monitor: Monitor | None = None  # None: a window audit, not monitored

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        match = _WINDOW.match(value)
        if not match or (
            match.group(2) is not None and not 1 <= int(match.group(2)) <= MAX_WINDOW_DAYS
        ):
            raise ValueError(
                f"{value!r} is not 'all', 'last_day' or 'last_N_days' with N from 1 to "
                f"{MAX_WINDOW_DAYS:,} (use 'all' for all time)"
            )
        return value

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one metric is needed")
        canonical = [canonical_metric(name) for name in value]
        return list(dict.fromkeys(canonical))

    @field_validator("attributes")
    @classmethod
    def _attributes(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("attributes are listed more than once")
        for name in value:
            if not name.strip() or name != name.strip():
                raise ValueError(f"attribute name {name!r} is empty or has surrounding spaces")
            if name in CANONICAL_COLUMNS or INTERSECTION_SEP in name:
                raise ValueError(
                    f"attribute name {name!r} is reserved (one of {list(CANONICAL_COLUMNS)}) "
                    f"or holds the intersection separator {INTERSECTION_SEP!r}"
                )
        return value

    @field_validator("source")
    @classmethod
    def _not_a_catalogue(cls, value: str) -> str:
        *schemas, table = value.lower().split(".")
        if (
            any(s in CATALOGUE_SCHEMAS or s.startswith("pg_") for s in schemas)
            or table.startswith(CATALOGUE_PREFIXES)
        ):
            raise ValueError(
                f"source {value!r} is a system catalogue of the database; a source is a table or "
                f"view of predictions (not in {sorted(CATALOGUE_SCHEMAS)}, not named "
                f"{' or '.join(p + '*' for p in CATALOGUE_PREFIXES)})"
            )
        return value

    @field_validator("source_db")
    @classmethod
    def _no_password(cls, value: str | None) -> str | None:
        if value is None:
            return value
        from sqlalchemy.engine import make_url  # here: audit_frame never needs SQLAlchemy
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(value)
        except (ArgumentError, ValueError):
            raise ValueError(
                "source_db is not a database URL (expected dialect+driver://user@host:port/db)"
            ) from None
        if holds_secret(url):
            raise ValueError(
                "source_db must not hold a password (in the URL or its query string); set it in "
                "the environment variable named by source_db_password_env"
            )
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> Audit:
        names = [self.source.rpartition(".")[2], *self.columns.values(), *self.attributes]
        if self.decision is not None:
            names.append(self.decision.score)
            if "y_pred" in self.columns:
                raise ValueError("columns.y_pred and decision exclude each other")
        long = [n for n in names if len(n.encode()) > MAX_IDENTIFIER_BYTES]
        if long:
            raise ValueError(
                f"names longer than {MAX_IDENTIFIER_BYTES} bytes (the identifier limit of "
                f"PostgreSQL and MariaDB): {long}"
            )
        unknown = set(self.columns) - set(CANONICAL_COLUMNS) - set(self.attributes)
        if unknown:
            raise ValueError(
                f"columns: {sorted(unknown)} are neither {list(CANONICAL_COLUMNS)} "
                "nor configured attributes"
            )
        for i, combo in enumerate(self.intersections):
            if len(combo) < 2 or len(set(combo)) != len(combo):
                raise ValueError(f"intersections[{i}]: needs two or more distinct attributes")
            missing = [a for a in combo if a not in self.attributes]
            if missing:
                raise ValueError(f"intersections[{i}]: {missing} not in attributes")
        stray = set(self.reference_groups) - set(self.attributes) - set(self.intersection_names)
        if stray:
            raise ValueError(f"reference_groups: {sorted(stray)} are not attributes of this audit")
        return self

    @property
    def window_days(self) -> int | None:
        """Length of the window in days; None for all time."""
        match = _WINDOW.match(self.window)
        assert match is not None
        if match.group(1) == "all":
            return None
        return 1 if match.group(1) == "last_day" else int(match.group(2))

    @property
    def timestamp_needed_by(self) -> str | None:
        """What needs each prediction's timestamp (``predicted_at``): a window of days or the
        monitor; None for window "all" without monitoring, whose source may lack the column."""
        if self.window_days is not None:
            return f"window {self.window!r}"
        return "[audits.monitor]" if self.monitor is not None else None

    @property
    def window_length(self) -> timedelta | None:
        days = self.window_days
        return None if days is None else timedelta(days=days)

    @property
    def intersection_names(self) -> list[str]:
        return [INTERSECTION_SEP.join(combo) for combo in self.intersections]

    def source_column(self, canonical: str) -> str:
        """The source column that holds ``canonical`` (a canonical column or an attribute)."""
        return self.columns.get(canonical, canonical)

    def config_hash(self) -> str:
        """SHA-256 of the canonical JSON of this audit: equal configurations hash equally."""
        payload = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()


class AuditFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    audits: Annotated[list[Audit], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique_names(self) -> AuditFile:
        names = [a.name for a in self.audits]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"audit names must be unique; repeated: {dupes}")
        return self

    def get(self, name: str) -> Audit:
        for audit in self.audits:
            if audit.name == name:
                return audit
        raise ConfigError(f"no audit named {name!r}; configured: {[a.name for a in self.audits]}")


def audit_from_options(
    *,
    attributes: list[str],
    intersections: list[list[str]] | tuple = (),
    reference_groups: dict[str, str] | None = None,
    metrics: list[str] | None = None,
    name: str = "frame",
    model_id: str = "frame",
    **options: Any,
) -> Audit:
    """An Audit from flat options: the TOML keys of ``[audits.thresholds]``, ``[audits.smoothing]``
    and ``[audits.scan]`` given by their own names (``tolerance``, ``alpha``, ``cps_lambda``, ...),
    with the same defaults. An unknown option is a ConfigError naming it."""
    sections: dict[str, dict[str, object]] = {"thresholds": {}, "smoothing": {}, "scan": {}}
    owners = {
        key: section
        for section, model_class in (("thresholds", Thresholds), ("smoothing", Smoothing), ("scan", Scan))
        for key in model_class.model_fields
    }
    unknown = sorted(set(options) - set(owners))
    if unknown:
        raise ConfigError(f"unknown audit option(s) {unknown}; known: {sorted(owners)}")
    for key, value in options.items():
        sections[owners[key]][key] = value
    data: dict[str, object] = {
        "name": name,
        "model_id": model_id,
        "attributes": list(attributes),
        "intersections": [list(i) for i in intersections],
        "reference_groups": dict(reference_groups or {}),
        **sections,
    }
    if metrics is not None:
        data["metrics"] = list(metrics)
    return parse_config({"audits": [data]}, "<options>").audits[0]


def _location(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _keys_at(loc: tuple) -> list[str]:
    """The keys the configuration accepts beside the key at ``loc`` (a table's field names and
    their accepted aliases)."""
    model: Any = AuditFile
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        model = _model_in(field.annotation) if field is not None else None
        if model is None:
            return []
    keys = set(model.model_fields)
    for field in model.model_fields.values():
        keys.update(c for c in getattr(field.validation_alias, "choices", ()) if isinstance(c, str))
    return sorted(keys)


def _model_in(annotation: Any) -> Any:
    """The configuration model an annotation holds (through Optional, list, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for a in get_args(annotation) if (m := _model_in(a)) is not None), None)


def _problem(error: Any) -> str:
    """One configuration error in words: an unknown key with the keys accepted there (and the
    likeliest one meant), a value error without pydantic's prefix."""
    where, message = _location(error["loc"]), error["msg"]
    if error["type"] == "extra_forbidden":
        keys = _keys_at(error["loc"])
        meant = difflib.get_close_matches(str(error["loc"][-1]), keys, n=1)
        hint = f"did you mean {meant[0]!r}? " if meant else ""
        message = f"unknown key; {hint}keys accepted here: {', '.join(keys)}"
    return f"  {where}: {message.removeprefix('Value error, ')}"


def parse_config(data: dict, origin: str = "<config>") -> AuditFile:
    """Validate a parsed TOML document; raise ConfigError naming each bad key."""
    try:
        return AuditFile.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(e) for e in exc.errors()]
        raise ConfigError(
            f"invalid audit configuration {origin}:\n" + "\n".join(problems)
        ) from None
