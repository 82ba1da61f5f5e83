"""The monitor's alarms weigh each comparison by its first night's variance: monitor_results
gains e-BH's weight (schemas.results.MONITOR_STATE, tasks.monitor).

Rows stored before hold 0: such a comparison's weight is fixed on its next night with pairs, and
until then it stays out of the e-BH family, as a new comparison does; its wealth carries on.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27 07:00:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

# a double on MariaDB/MySQL too (db.models.Real), where Float alone is single-precision FLOAT
REAL = sa.Float().with_variant(mysql.DOUBLE(asdecimal=False), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("monitor_results", schema=None) as batch:
        batch.add_column(sa.Column("ebh_weight", REAL, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("monitor_results", schema=None) as batch:
        batch.drop_column("ebh_weight")
