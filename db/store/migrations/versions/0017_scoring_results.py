"""Local Law 144 scoring counts: scoring_results (per group, the rows scoring strictly above the
median score of the window's scores, with that median).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03 10:00:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def _key(length: int, mariadb_length: int):
    return sa.String(length).with_variant(
        mysql.VARCHAR(mariadb_length, collation="utf8mb4_nopad_bin"), "mysql", "mariadb"
    )


def _real():
    return sa.Float().with_variant(mysql.DOUBLE(asdecimal=False), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "scoring_results",
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("above_median", sa.BigInteger(), nullable=False),
        sa.Column("median_score", _real(), nullable=False),
        sa.Column("sample_size", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attribute", _key(256, 128), nullable=False),
        sa.Column("group_name", _key(512, 255), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["audit_runs.id"],
            name=op.f("fk_scoring_results_run_id_audit_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "run_id", "attribute", "group_name", name=op.f("pk_scoring_results")
        ),
    )


def downgrade() -> None:
    op.drop_table("scoring_results")
