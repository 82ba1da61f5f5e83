"""Meta-metric results.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21 20:14:14.671467
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metametric_results",
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attribute", sa.String(length=256), nullable=False),
        sa.Column("metric", sa.String(length=16), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("k_undefined", sa.Integer(), nullable=False),
        sa.Column("n_min", sa.Float(), nullable=True),
        sa.Column("n_median", sa.Float(), nullable=True),
        sa.Column("n_max", sa.Float(), nullable=True),
        sa.Column("mm_diff", sa.Float(), nullable=True),
        sa.Column("mm_ratio", sa.Float(), nullable=True),
        sa.Column("max_abs_diff", sa.Float(), nullable=True),
        sa.Column("mad", sa.Float(), nullable=True),
        sa.Column("var", sa.Float(), nullable=True),
        sa.Column("gei", sa.Float(), nullable=True),
        sa.Column("corrected_var", sa.Float(), nullable=True),
        sa.Column("interval_low", sa.Float(), nullable=True),
        sa.Column("interval_high", sa.Float(), nullable=True),
        sa.Column("level", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["audit_runs.id"],
            name=op.f("fk_metametric_results_run_id_audit_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "run_id", "attribute", "metric", name=op.f("pk_metametric_results")
        ),
    )


def downgrade() -> None:
    op.drop_table("metametric_results")
