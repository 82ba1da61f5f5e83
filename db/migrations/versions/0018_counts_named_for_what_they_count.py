"""Counts named for what they count: ``n`` meant several things. match_results' ``n`` becomes
``predictions_group`` (the group's predictions the MATCH distribution draws), the meta-metrics'
``n_min``, ``n_median``, ``n_max`` become ``denominator_min``, ``denominator_median``,
``denominator_max`` (the rate's denominators of the groups kept), and calibration_results' ``n``
becomes ``labelled`` (the bin's predictions with a known outcome). ``n`` is left to count every
valid prediction, labelled or not (score_results, threshold_results, scoring_results).

On MariaDB/MySQL, where a rename restates the column's type, 0015 as first written left its
renamed columns single-precision FLOAT: they are doubles again (values already rounded stay so).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04 10:00:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def _real():
    # MariaDB/MySQL rename a column by restating its type: a double there (db.models.Real)
    return sa.Float().with_variant(mysql.DOUBLE(asdecimal=False), "mysql", "mariadb")


# table: {old name: (new name, type, nullable)}
RENAMES = {
    "match_results": {"n": ("predictions_group", sa.BigInteger(), False)},
    "calibration_results": {"n": ("labelled", sa.BigInteger(), False)},
    "metametric_results": {
        "n_min": ("denominator_min", _real(), True),
        "n_median": ("denominator_median", _real(), True),
        "n_max": ("denominator_max", _real(), True),
    },
}


def _rename(table: str, names: dict[str, tuple[str, sa.types.TypeEngine, bool]]) -> None:
    with op.batch_alter_table(table, schema=None) as batch:
        for old, (new, kind, nullable) in names.items():
            batch.alter_column(
                old, new_column_name=new, existing_type=kind, existing_nullable=nullable
            )


# the columns 0015 renamed, all non-null
RENAMED_IN_0015 = {
    "monitor_results": [
        "numerator_group",
        "denominator_group",
        "numerator_reference",
        "denominator_reference",
    ],
    "metametric_results": ["confidence"],
}


def upgrade() -> None:
    for table, names in RENAMES.items():
        _rename(table, names)
    if op.get_bind().dialect.name in {"mysql", "mariadb"}:
        for table, columns in RENAMED_IN_0015.items():
            for column in columns:
                op.alter_column(
                    table, column, type_=mysql.DOUBLE(asdecimal=False), existing_nullable=False
                )


def downgrade() -> None:
    for table, names in RENAMES.items():
        _rename(table, {new: (old, kind, null) for old, (new, kind, null) in names.items()})
