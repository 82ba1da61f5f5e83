"""MATCH test and two-group metric results.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 19:57:23.414187
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "match_results",
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attribute", sa.String(length=256), nullable=False),
        sa.Column("group_name", sa.String(length=512), nullable=False),
        sa.Column("reference", sa.String(length=512), nullable=False),
        sa.Column("metric", sa.String(length=16), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("percentile", sa.Float(), nullable=True),
        sa.Column("percentile_approx", sa.Float(), nullable=True),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("undefined_reason", sa.String(length=128), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["audit_runs.id"],
            name=op.f("fk_match_results_run_id_audit_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "run_id",
            "attribute",
            "group_name",
            "reference",
            "metric",
            name=op.f("pk_match_results"),
        ),
    )
    op.create_table(
        "two_group_results",
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attribute", sa.String(length=256), nullable=False),
        sa.Column("group_name", sa.String(length=512), nullable=False),
        sa.Column("reference", sa.String(length=512), nullable=False),
        sa.Column("metric", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("undefined_reason", sa.String(length=128), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["audit_runs.id"],
            name=op.f("fk_two_group_results_run_id_audit_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "run_id",
            "attribute",
            "group_name",
            "reference",
            "metric",
            name=op.f("pk_two_group_results"),
        ),
    )


def downgrade() -> None:
    op.drop_table("two_group_results")
    op.drop_table("match_results")
