"""The monitor's bets open on a change: monitor_results gains each side's CUSUM, its sums since
its last zero and its gate (schemas.results.MONITOR_STATE).

Rows stored before hold 0 in them: a comparison continued from such a state starts with closed
gates and no run, as a new one would; its wealth carries on (any predictable bet keeps the
e-process valid).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26 21:00:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

COLUMNS = [
    f"{name}_{side}" for name in ("cusum", "run_y", "run_q", "gate") for side in ("up", "down")
]
# a double on MariaDB/MySQL too (db.store.models.Real), where Float alone is single-precision FLOAT
REAL = sa.Float().with_variant(mysql.DOUBLE(asdecimal=False), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("monitor_results", schema=None) as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, REAL, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("monitor_results", schema=None) as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
