"""Planning results.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21 20:12:24.648970
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "planning_results",
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attribute", sa.String(length=256), nullable=False),
        sa.Column("group_name", sa.String(length=512), nullable=False),
        sa.Column("reference", sa.String(length=512), nullable=False),
        sa.Column("metric", sa.String(length=16), nullable=False),
        sa.Column("value_group", sa.Float(), nullable=True),
        sa.Column("value_reference", sa.Float(), nullable=True),
        sa.Column("disparity", sa.Float(), nullable=True),
        sa.Column("ratio", sa.Float(), nullable=True),
        sa.Column("tau", sa.Float(), nullable=True),
        sa.Column("n_group", sa.Float(), nullable=False),
        sa.Column("n_reference", sa.Float(), nullable=False),
        sa.Column("needed", sa.Float(), nullable=True),
        sa.Column("needed_neyman", sa.Float(), nullable=True),
        sa.Column("neyman_share_group", sa.Float(), nullable=True),
        sa.Column("achieved_power", sa.Float(), nullable=True),
        sa.Column("verdict", sa.String(length=64), nullable=False),
        sa.Column("bias_n", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["audit_runs.id"],
            name=op.f("fk_planning_results_run_id_audit_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "run_id",
            "attribute",
            "group_name",
            "reference",
            "metric",
            name=op.f("pk_planning_results"),
        ),
    )


def downgrade() -> None:
    op.drop_table("planning_results")
