"""Initial schema: predictions, audit_runs, group_counts, metric_results, quarantined_rows.

Revision ID: 0001
Revises:
Create Date: 2026-11-21 19:47:41.710083
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_runs",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("audit_name", sa.String(length=128), nullable=False),
        sa.Column("model_id", sa.String(length=128), nullable=False),
        sa.Column("model_version", sa.String(length=64), nullable=True),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("as_of", sa.DateTime(timezone=True), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=True),
        sa.Column("window_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rows_read", sa.BigInteger(), nullable=False),
        sa.Column("rows_valid", sa.BigInteger(), nullable=False),
        sa.Column("rows_quarantined", sa.BigInteger(), nullable=False),
        sa.Column("rows_unlabelled", sa.BigInteger(), nullable=False),
        sa.Column(
            "config",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.Column("input_fingerprint", sa.String(length=64), nullable=True),
        sa.Column("code_version", sa.String(length=32), nullable=False),
        sa.Column("flow_run_id", sa.String(length=64), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "timings",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "summary",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_runs")),
        sa.UniqueConstraint("audit_name", "model_id", "version", name="audit_model_version"),
    )
    with op.batch_alter_table("audit_runs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_audit_runs_lookup", ["audit_name", "model_id", "status"], unique=False
        )

    op.create_table(
        "predictions",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("prediction_id", sa.String(length=128), nullable=False),
        sa.Column("model_id", sa.String(length=128), nullable=False),
        sa.Column("model_version", sa.String(length=64), nullable=False),
        sa.Column("predicted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("y_true", sa.SmallInteger(), nullable=True),
        sa.Column("y_pred", sa.SmallInteger(), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column(
            "attributes",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "score >= 0 AND score <= 1", name=op.f("ck_predictions_score_unit_interval")
        ),
        sa.CheckConstraint("y_pred IN (0, 1)", name=op.f("ck_predictions_y_pred_binary")),
        sa.CheckConstraint("y_true IN (0, 1)", name=op.f("ck_predictions_y_true_binary")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_predictions")),
        sa.UniqueConstraint("model_id", "prediction_id", name="model_prediction"),
    )
    with op.batch_alter_table("predictions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_predictions_model_time", ["model_id", "predicted_at"], unique=False
        )

    op.create_table(
        "group_counts",
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attribute", sa.String(length=256), nullable=False),
        sa.Column("group_name", sa.String(length=512), nullable=False),
        sa.Column("subset", sa.String(length=8), nullable=False),
        sa.Column("tp", sa.BigInteger(), nullable=False),
        sa.Column("fp", sa.BigInteger(), nullable=False),
        sa.Column("fn", sa.BigInteger(), nullable=False),
        sa.Column("tn", sa.BigInteger(), nullable=False),
        sa.Column("n_unlabelled", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["audit_runs.id"],
            name=op.f("fk_group_counts_run_id_audit_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "run_id", "attribute", "group_name", "subset", name=op.f("pk_group_counts")
        ),
    )
    op.create_table(
        "metric_results",
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attribute", sa.String(length=256), nullable=False),
        sa.Column("group_name", sa.String(length=512), nullable=False),
        sa.Column("subset", sa.String(length=8), nullable=False),
        sa.Column("metric", sa.String(length=16), nullable=False),
        sa.Column("estimator", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("numerator", sa.Float(), nullable=True),
        sa.Column("denominator", sa.Float(), nullable=True),
        sa.Column("undefined_reason", sa.String(length=128), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["audit_runs.id"],
            name=op.f("fk_metric_results_run_id_audit_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "run_id",
            "attribute",
            "group_name",
            "subset",
            "metric",
            "estimator",
            name=op.f("pk_metric_results"),
        ),
    )
    op.create_table(
        "quarantined_rows",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("source", sa.String(length=512), nullable=False),
        sa.Column("row_ref", sa.String(length=128), nullable=False),
        sa.Column("column_name", sa.String(length=128), nullable=True),
        sa.Column("value", sa.Text(), nullable=True),
        sa.Column("rule", sa.String(length=256), nullable=False),
        sa.Column(
            "row",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["audit_runs.id"],
            name=op.f("fk_quarantined_rows_run_id_audit_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_quarantined_rows")),
    )
    with op.batch_alter_table("quarantined_rows", schema=None) as batch_op:
        batch_op.create_index("ix_quarantined_rows_run", ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("quarantined_rows", schema=None) as batch_op:
        batch_op.drop_index("ix_quarantined_rows_run")

    op.drop_table("quarantined_rows")
    op.drop_table("metric_results")
    op.drop_table("group_counts")
    with op.batch_alter_table("predictions", schema=None) as batch_op:
        batch_op.drop_index("ix_predictions_model_time")

    op.drop_table("predictions")
    with op.batch_alter_table("audit_runs", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_runs_lookup")

    op.drop_table("audit_runs")
