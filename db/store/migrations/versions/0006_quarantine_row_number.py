"""Quarantined rows keep their position in the window or file.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21 20:21:32.113255
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("quarantined_rows", schema=None) as batch_op:
        batch_op.add_column(sa.Column("row_number", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("quarantined_rows", schema=None) as batch_op:
        batch_op.drop_column("row_number")
