"""Statistics at every group size and with late labels.

- group_counts: unlabelled predictions split by decision (unlabelled_pos, unlabelled_neg), for
  PPR and PNR over every valid prediction;
- detection_results: the rate's counts named as such (x_group -> numerator_group, n_group ->
  denominator_group, x_reference -> numerator_reference, n_reference -> denominator_reference),
  undefined_reason -> reason (also: min_group_size, two-valued repeats), the test used;
- planning_results: disparity -> difference (detection's name), n_group -> size_group,
  n_reference -> size_reference (group sizes, not denominators), the denominators, the
  multiplicity-adjusted level, how the power was computed, reason;
- match_results: Benjamini-Hochberg adjusted p, undefined_reason -> reason;
- metametric_results: reason.

Revision ID: 0009
Revises: 0012
Create Date: 2026-11-22 09:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

DETECTION_RENAMES = [
    ("x_group", "numerator_group"),
    ("n_group", "denominator_group"),
    ("x_reference", "numerator_reference"),
    ("n_reference", "denominator_reference"),
]
PLANNING_RENAMES = [
    ("disparity", "difference", True),
    ("n_group", "size_group", False),
    ("n_reference", "size_reference", False),
]


def upgrade() -> None:
    with op.batch_alter_table("group_counts", schema=None) as batch:
        batch.add_column(sa.Column("unlabelled_pos", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("unlabelled_neg", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("detection_results", schema=None) as batch:
        for old, new in DETECTION_RENAMES:
            batch.alter_column(
                old, new_column_name=new, existing_type=sa.Float(), existing_nullable=True
            )
        batch.alter_column(
            "undefined_reason",
            new_column_name="reason",
            type_=sa.Text(),
            existing_type=sa.String(length=128),
            existing_nullable=True,
        )
        batch.add_column(sa.Column("test", sa.String(length=8), nullable=True))
    with op.batch_alter_table("planning_results", schema=None) as batch:
        for old, new, nullable in PLANNING_RENAMES:
            batch.alter_column(
                old, new_column_name=new, existing_type=sa.Float(), existing_nullable=nullable
            )
        batch.add_column(sa.Column("denominator_group", sa.Float(), nullable=True))
        batch.add_column(sa.Column("denominator_reference", sa.Float(), nullable=True))
        batch.add_column(sa.Column("level", sa.Float(), nullable=True))
        batch.add_column(sa.Column("power_method", sa.String(length=8), nullable=True))
        batch.add_column(sa.Column("reason", sa.Text(), nullable=True))
    with op.batch_alter_table("match_results", schema=None) as batch:
        batch.add_column(sa.Column("p_adjusted", sa.Float(), nullable=True))
        batch.alter_column(
            "undefined_reason",
            new_column_name="reason",
            type_=sa.Text(),
            existing_type=sa.String(length=128),
            existing_nullable=True,
        )
    with op.batch_alter_table("metametric_results", schema=None) as batch:
        batch.add_column(sa.Column("reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("metametric_results", schema=None) as batch:
        batch.drop_column("reason")
    with op.batch_alter_table("match_results", schema=None) as batch:
        batch.alter_column(
            "reason",
            new_column_name="undefined_reason",
            type_=sa.String(length=128),
            existing_type=sa.Text(),
            existing_nullable=True,
        )
        batch.drop_column("p_adjusted")
    with op.batch_alter_table("planning_results", schema=None) as batch:
        for column in ("reason", "power_method", "level", "denominator_reference"):
            batch.drop_column(column)
        batch.drop_column("denominator_group")
        for old, new, nullable in PLANNING_RENAMES:
            batch.alter_column(
                new, new_column_name=old, existing_type=sa.Float(), existing_nullable=nullable
            )
    with op.batch_alter_table("detection_results", schema=None) as batch:
        batch.drop_column("test")
        batch.alter_column(
            "reason",
            new_column_name="undefined_reason",
            type_=sa.String(length=128),
            existing_type=sa.Text(),
            existing_nullable=True,
        )
        for old, new in DETECTION_RENAMES:
            batch.alter_column(
                new, new_column_name=old, existing_type=sa.Float(), existing_nullable=True
            )
    with op.batch_alter_table("group_counts", schema=None) as batch:
        batch.drop_column("unlabelled_neg")
        batch.drop_column("unlabelled_pos")
