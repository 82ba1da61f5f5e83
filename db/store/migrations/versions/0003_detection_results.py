"""Detection results.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21 20:05:14.583854
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "detection_results",
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attribute", sa.String(length=256), nullable=False),
        sa.Column("group_name", sa.String(length=512), nullable=False),
        sa.Column("reference", sa.String(length=512), nullable=False),
        sa.Column("metric", sa.String(length=16), nullable=False),
        sa.Column("x_group", sa.Float(), nullable=True),
        sa.Column("n_group", sa.Float(), nullable=True),
        sa.Column("x_reference", sa.Float(), nullable=True),
        sa.Column("n_reference", sa.Float(), nullable=True),
        sa.Column("difference", sa.Float(), nullable=True),
        sa.Column("mean", sa.Float(), nullable=True),
        sa.Column("sd", sa.Float(), nullable=True),
        sa.Column("direction", sa.String(length=8), nullable=True),
        sa.Column("prob_deviation", sa.Float(), nullable=True),
        sa.Column("hdi_low", sa.Float(), nullable=True),
        sa.Column("hdi_high", sa.Float(), nullable=True),
        sa.Column("decision", sa.String(length=16), nullable=True),
        sa.Column("simple_rule", sa.SmallInteger(), nullable=False),
        sa.Column("z", sa.Float(), nullable=True),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("p_adjusted", sa.Float(), nullable=True),
        sa.Column("flagged", sa.Boolean(), nullable=False),
        sa.Column("undefined_reason", sa.String(length=128), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["audit_runs.id"],
            name=op.f("fk_detection_results_run_id_audit_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "run_id",
            "attribute",
            "group_name",
            "reference",
            "metric",
            name=op.f("pk_detection_results"),
        ),
    )


def downgrade() -> None:
    op.drop_table("detection_results")
