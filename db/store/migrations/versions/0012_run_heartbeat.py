"""A running run's heartbeat: the next run takes a silent one for dead.

Revision ID: 0012
Revises: 0008
Create Date: 2026-11-22 09:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit_runs", schema=None) as batch_op:
        batch_op.drop_column("heartbeat_at")
