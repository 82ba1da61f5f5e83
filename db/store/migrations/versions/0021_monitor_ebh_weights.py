"""The monitor's alarms weigh each comparison by its first night's variance: monitor_results
gains e-BH's weight (schemas.results.MONITOR_STATE, tasks.monitor).

Rows stored before get 1 over their mean pairs a night (n_pairs/nights; sample sizes only, as the
weight of a new comparison), so every comparison that had pairs stays in the e-BH family with its
wealth; one that never had pairs holds 0 and joins on its first night with pairs, as a new one.

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

# a double on MariaDB/MySQL too (db.store.models.Real), where Float alone is single-precision FLOAT
REAL = sa.Float().with_variant(mysql.DOUBLE(asdecimal=False), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("monitor_results", schema=None) as batch:
        batch.add_column(sa.Column("ebh_weight", REAL, nullable=False, server_default="0"))
    results = sa.table(
        "monitor_results", *(sa.column(c) for c in ("ebh_weight", "nights", "n_pairs"))
    )
    op.execute(
        results.update()
        .where(results.c.n_pairs > 0)
        .values(ebh_weight=results.c.nights / results.c.n_pairs)
    )


def downgrade() -> None:
    with op.batch_alter_table("monitor_results", schema=None) as batch:
        batch.drop_column("ebh_weight")
