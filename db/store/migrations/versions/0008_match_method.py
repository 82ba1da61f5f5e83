"""MATCH results say whether the exact sum or an approximation gave the percentile.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-21 20:56:15.352403
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("match_results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("method", sa.String(length=8), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("match_results", schema=None) as batch_op:
        batch_op.drop_column("method")
