"""Detection's Bayesian decisions made jointly: detection_results gains ``hdi_mass``, the mass of
the row's HDI, 1 − alpha/m over the run's m tested rows (Bonferroni), at which ``decision`` (HDI +
ROPE) and ``simple_rule`` are made, on tested rows only.

Rows stored before stay as they were and keep ``hdi_mass`` NULL, which marks them: their HDIs
held 1 − alpha each, and their decisions were made unadjusted on every row with both rates
defined, tested or not. The report and the CLI print no decision of such a row (tasks.detection
.stated_decisions).

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 17:30:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("detection_results", schema=None) as batch:
        real = sa.Float().with_variant(mysql.DOUBLE(asdecimal=False), "mysql", "mariadb")
        batch.add_column(sa.Column("hdi_mass", real, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("detection_results", schema=None) as batch:
        batch.drop_column("hdi_mass")
