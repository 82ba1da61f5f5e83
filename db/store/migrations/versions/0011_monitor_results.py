"""Monitored runs: monitor_results (e-values, e-processes, confidence sequences, alarms and the
state the next run continues from) and comparison_results.overlapping.

Revision ID: 0011
Revises: 0008
Create Date: 2026-11-22 09:20:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0009"
branch_labels = None
depends_on = None

FLOATS = [
    "x_group",
    "n_group",
    "x_reference",
    "n_reference",
    "unlabelled_group",
    "unlabelled_reference",
    "pairs",
    "e_value_up",
    "e_value_down",
    "e_value",
    "e_process",
    "cs_low",
    "cs_high",
    "nights",
    "log_m_up",
    "log_m_down",
    "w_k",
    "w_d",
    "w_v",
    "n_pairs",
    "s_d",
    "s_v",
    "cs_a",
    "cs_b",
    "cs_c",
    "cs_dq",
    "cs_eq",
]


def upgrade() -> None:
    op.create_table(
        "monitor_results",
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attribute", sa.String(length=256), nullable=False),
        sa.Column("group_name", sa.String(length=512), nullable=False),
        sa.Column("reference", sa.String(length=512), nullable=False),
        sa.Column("metric", sa.String(length=16), nullable=False),
        *[sa.Column(name, sa.Float(), nullable=False) for name in FLOATS],
        sa.Column("difference", sa.Float(), nullable=True),
        sa.Column("crossed", sa.Boolean(), nullable=False),
        sa.Column("alarm", sa.Boolean(), nullable=False),
        sa.Column("previous_run_id", sa.BigInteger(), nullable=True),
        sa.Column("previous_as_of", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["audit_runs.id"],
            name=op.f("fk_monitor_results_run_id_audit_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "run_id",
            "attribute",
            "group_name",
            "reference",
            "metric",
            name=op.f("pk_monitor_results"),
        ),
    )
    with op.batch_alter_table("comparison_results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("overlapping", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("comparison_results", schema=None) as batch_op:
        batch_op.drop_column("overlapping")
    op.drop_table("monitor_results")
