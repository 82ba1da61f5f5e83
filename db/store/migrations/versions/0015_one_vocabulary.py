"""One vocabulary for stored results: a comparison's rate counts are ``numerator_group``,
``denominator_group``, ``numerator_reference`` and ``denominator_reference`` in monitor_results
as in detection_results (were x_group, n_group, x_reference, n_reference), and ``level`` is a
test's significance level only: the meta-metrics' interval level becomes ``confidence``.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 10:45:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

RENAMES = {
    "monitor_results": {
        "x_group": "numerator_group",
        "n_group": "denominator_group",
        "x_reference": "numerator_reference",
        "n_reference": "denominator_reference",
    },
    "metametric_results": {"level": "confidence"},
}


def _rename(table: str, names: dict[str, str]) -> None:
    # MariaDB/MySQL rename a column by restating its type: a double there (db.store.models.Real),
    # not FLOAT, which is single precision
    real = sa.Float().with_variant(mysql.DOUBLE(asdecimal=False), "mysql", "mariadb")
    with op.batch_alter_table(table, schema=None) as batch:
        for old, new in names.items():
            batch.alter_column(old, new_column_name=new, existing_type=real, existing_nullable=False)


def upgrade() -> None:
    for table, names in RENAMES.items():
        _rename(table, names)


def downgrade() -> None:
    for table, names in RENAMES.items():
        _rename(table, {new: old for old, new in names.items()})
