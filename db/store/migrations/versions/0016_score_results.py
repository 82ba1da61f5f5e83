"""Score audits: score_results (AUC and calibration of each group against its reference),
calibration_results (outcome rate per score bin) and threshold_results (rates at every bin edge).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 11:40:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

TABLES = ["score_results", "calibration_results", "threshold_results"]


def _key(length: int, mariadb_length: int):
    return sa.String(length).with_variant(
        mysql.VARCHAR(mariadb_length, collation="utf8mb4_nopad_bin"), "mysql", "mariadb"
    )


def _real():
    return sa.Float().with_variant(mysql.DOUBLE(asdecimal=False), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "score_results",
        sa.Column("reference", _key(512, 255), nullable=False),
        sa.Column("n_group", sa.BigInteger(), nullable=False),
        sa.Column("positives_group", sa.BigInteger(), nullable=False),
        sa.Column("negatives_group", sa.BigInteger(), nullable=False),
        sa.Column("auc_group", _real(), nullable=True),
        sa.Column("auc_variance_group", _real(), nullable=True),
        sa.Column("auc_low_group", _real(), nullable=True),
        sa.Column("auc_high_group", _real(), nullable=True),
        sa.Column("in_the_large_group", _real(), nullable=True),
        sa.Column("slope_group", _real(), nullable=True),
        sa.Column("n_reference", sa.BigInteger(), nullable=False),
        sa.Column("positives_reference", sa.BigInteger(), nullable=False),
        sa.Column("negatives_reference", sa.BigInteger(), nullable=False),
        sa.Column("auc_reference", _real(), nullable=True),
        sa.Column("auc_variance_reference", _real(), nullable=True),
        sa.Column("auc_low_reference", _real(), nullable=True),
        sa.Column("auc_high_reference", _real(), nullable=True),
        sa.Column("in_the_large_reference", _real(), nullable=True),
        sa.Column("slope_reference", _real(), nullable=True),
        sa.Column("auc_p_value", _real(), nullable=True),
        sa.Column("calibration_statistic", _real(), nullable=True),
        sa.Column("calibration_p_value", _real(), nullable=True),
        sa.Column("auc_p_adjusted", _real(), nullable=True),
        sa.Column("calibration_p_adjusted", _real(), nullable=True),
        sa.Column("confidence", _real(), nullable=False),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attribute", _key(256, 128), nullable=False),
        sa.Column("group_name", _key(512, 255), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["audit_runs.id"],
            name=op.f("fk_score_results_run_id_audit_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "reference", "run_id", "attribute", "group_name", name=op.f("pk_score_results")
        ),
    )
    op.create_table(
        "calibration_results",
        sa.Column("score_bin", _real(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("positives", sa.BigInteger(), nullable=False),
        sa.Column("mean_score", _real(), nullable=True),
        sa.Column("observed_rate", _real(), nullable=True),
        sa.Column("rate_low", _real(), nullable=True),
        sa.Column("rate_high", _real(), nullable=True),
        sa.Column("confidence", _real(), nullable=False),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attribute", _key(256, 128), nullable=False),
        sa.Column("group_name", _key(512, 255), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["audit_runs.id"],
            name=op.f("fk_calibration_results_run_id_audit_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "score_bin", "run_id", "attribute", "group_name", name=op.f("pk_calibration_results")
        ),
    )
    op.create_table(
        "threshold_results",
        sa.Column("threshold", _real(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("selected", sa.BigInteger(), nullable=False),
        sa.Column("tp", sa.BigInteger(), nullable=False),
        sa.Column("fp", sa.BigInteger(), nullable=False),
        sa.Column("fn", sa.BigInteger(), nullable=False),
        sa.Column("tn", sa.BigInteger(), nullable=False),
        sa.Column("selection_rate", _real(), nullable=True),
        sa.Column("tpr", _real(), nullable=True),
        sa.Column("fpr", _real(), nullable=True),
        sa.Column("fnr", _real(), nullable=True),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attribute", _key(256, 128), nullable=False),
        sa.Column("group_name", _key(512, 255), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["audit_runs.id"],
            name=op.f("fk_threshold_results_run_id_audit_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "threshold", "run_id", "attribute", "group_name", name=op.f("pk_threshold_results")
        ),
    )


def downgrade() -> None:
    for table in reversed(TABLES):
        op.drop_table(table)
