"""Comparison results and the views analysts read history from:

- latest_succeeded_runs: the newest succeeded run of every audit and model;
- metric_series: every succeeded run's raw per-group metrics, one row per run, group and metric.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-21 20:26:08.197202
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


LATEST = """
CREATE VIEW latest_succeeded_runs AS
SELECT r.* FROM audit_runs r
WHERE r.status = 'succeeded' AND r.version = (
    SELECT max(r2.version) FROM audit_runs r2
    WHERE r2.audit_name = r.audit_name AND r2.model_id = r.model_id AND r2.status = 'succeeded'
)
"""
SERIES = """
CREATE VIEW metric_series AS
SELECT r.audit_name, r.model_id, r.version, r.id AS run_id, r.as_of, r.window_start, r.window_end,
       m.attribute, m.group_name, m.metric, m.value, m.numerator, m.denominator,
       m.undefined_reason
FROM audit_runs r JOIN metric_results m ON m.run_id = r.id
WHERE r.status = 'succeeded' AND m.subset = 'group' AND m.estimator = 'raw'
"""


def upgrade() -> None:
    op.create_table(
        "comparison_results",
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attribute", sa.String(length=256), nullable=False),
        sa.Column("group_name", sa.String(length=512), nullable=False),
        sa.Column("metric", sa.String(length=16), nullable=False),
        sa.Column("previous_run_id", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("value_before", sa.Float(), nullable=True),
        sa.Column("value_after", sa.Float(), nullable=True),
        sa.Column("change", sa.Float(), nullable=True),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("p_adjusted", sa.Float(), nullable=True),
        sa.Column("significant", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["audit_runs.id"],
            name=op.f("fk_comparison_results_run_id_audit_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "run_id", "attribute", "group_name", "metric", name=op.f("pk_comparison_results")
        ),
    )
    op.execute(LATEST)
    op.execute(SERIES)


def downgrade() -> None:
    op.execute("DROP VIEW metric_series")
    op.execute("DROP VIEW latest_succeeded_runs")
    op.drop_table("comparison_results")
