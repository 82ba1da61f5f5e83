"""Counts named for what they count, and the test's settings on every row with a decision.

``n`` meant several things. match_results' ``n`` becomes ``predictions_group`` (the group's
predictions the MATCH distribution draws), the meta-metrics' ``n_min``, ``n_median``, ``n_max``
become ``denominator_min``, ``denominator_median``, ``denominator_max`` (the rate's denominators
of the groups kept), and calibration_results' ``n`` becomes ``labelled`` (the bin's predictions
with a known outcome). ``n`` is left to count every valid prediction, labelled or not
(score_results, threshold_results, scoring_results).

comparison_results and monitor_results gain ``tolerance`` and ``alpha``, as detection_results and
planning_results did in 0014: rows stored before hold their run's configured alpha (and, for the
monitor, tolerance), or the defaults of the time where the configuration left them unset; a
comparison's tolerance is 0 (its test is of any change).

On MariaDB/MySQL, where Float alone is single-precision FLOAT and a rename restates the column's
type, 0014 and 0015 as first written left their columns FLOAT: they are doubles again (values
already rounded stay so).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04 10:00:00
"""

import json

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

# a double on every database (db.store.models.Real)
REAL = sa.Float().with_variant(mysql.DOUBLE(asdecimal=False), "mysql", "mariadb")

Renamed = dict[str, tuple[str, sa.types.TypeEngine, bool]]  # old name: (new name, type, nullable)
RENAMES: dict[str, Renamed] = {
    "match_results": {"n": ("predictions_group", sa.BigInteger(), False)},
    "calibration_results": {"n": ("labelled", sa.BigInteger(), False)},
    "metametric_results": {
        "n_min": ("denominator_min", REAL, True),
        "n_median": ("denominator_median", REAL, True),
        "n_max": ("denominator_max", REAL, True),
    },
}
# the settings each table's rows gain, read from their run's configuration
SETTINGS = {"comparison_results": ("alpha",), "monitor_results": ("tolerance", "alpha")}
DEFAULTS = {"tolerance": 0.05, "alpha": 0.05}  # schemas.config.Thresholds at this revision
COMPARISON_TOLERANCE = 0.0  # tasks.compare.TOLERANCE
# the non-null columns 0014 added and 0015 renamed: FLOAT on MariaDB/MySQL as first written
SINGLE_PRECISION = {
    "detection_results": ["tolerance", "alpha"],
    "planning_results": ["tolerance", "alpha"],
    "monitor_results": [
        "numerator_group",
        "denominator_group",
        "numerator_reference",
        "denominator_reference",
    ],
    "metametric_results": ["confidence"],
}


def _rename(table: str, names: Renamed) -> None:
    # MariaDB/MySQL rename a column by restating its type: the type is given in full
    with op.batch_alter_table(table, schema=None) as batch:
        for old, (new, kind, nullable) in names.items():
            batch.alter_column(
                old, new_column_name=new, existing_type=kind, existing_nullable=nullable
            )


def _settings(config) -> dict[str, float]:
    if isinstance(config, str):
        config = json.loads(config)
    given = (config or {}).get("thresholds") or {}
    return {name: float(given.get(name, default)) for name, default in DEFAULTS.items()}


def _add_settings() -> None:
    for table in SETTINGS:
        with op.batch_alter_table(table, schema=None) as batch:
            for name in ("tolerance", "alpha"):
                batch.add_column(sa.Column(name, REAL, nullable=True))
    bind = op.get_bind()
    runs = sa.table("audit_runs", sa.column("id"), sa.column("config"))
    for run_id, config in bind.execute(sa.select(runs.c.id, runs.c.config)).all():
        settings = _settings(config)
        for table, names in SETTINGS.items():
            values = {name: settings[name] for name in names}
            if "tolerance" not in names:
                values["tolerance"] = COMPARISON_TOLERANCE
            rows = sa.table(table, sa.column("run_id"), *map(sa.column, values))
            bind.execute(rows.update().where(rows.c.run_id == run_id).values(values))
    for table in SETTINGS:
        with op.batch_alter_table(table, schema=None) as batch:
            for name in ("tolerance", "alpha"):
                batch.alter_column(name, existing_type=REAL, nullable=False)


def upgrade() -> None:
    for table, names in RENAMES.items():
        _rename(table, names)
    _add_settings()
    if op.get_bind().dialect.name in {"mysql", "mariadb"}:
        for table, columns in SINGLE_PRECISION.items():
            for column in columns:
                op.alter_column(table, column, type_=REAL, existing_nullable=False)


def downgrade() -> None:
    for table in reversed(list(SETTINGS)):
        with op.batch_alter_table(table, schema=None) as batch:
            for name in ("alpha", "tolerance"):
                batch.drop_column(name)
    for table, names in RENAMES.items():
        _rename(table, {new: (old, kind, null) for old, (new, kind, null) in names.items()})
