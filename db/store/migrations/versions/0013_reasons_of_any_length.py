"""Undefined metrics' reasons of any length: metric_results.undefined_reason and
two_group_results.undefined_reason become text, as every other reason column is (0009).

A reason joins every condition that holds ('; '), so MCC of a group without labels (all four
margins zero) needs 136 characters: PostgreSQL and MariaDB refused such a run at persist, SQLite
(which ignores lengths) stored it. Every model without outcomes yet starts there.

The view metric_series reads metric_results.undefined_reason: PostgreSQL alters no column a view
uses, and SQLite's batch mode cannot rename the rebuilt table under it, so the view is dropped
first and made again afterwards.

Revision ID: 0013
Revises: 0010
Create Date: 2026-11-24 10:45:00
"""

import sqlalchemy as sa
from alembic import op

from biasaudit.db.store.migrate import views

revision = "0013"
down_revision = "0010"
branch_labels = None
depends_on = None

TABLES = ("metric_results", "two_group_results")
SERIES = dict(views())["metric_series"]


def upgrade() -> None:
    op.execute("DROP VIEW metric_series")
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch:
            batch.alter_column(
                "undefined_reason",
                type_=sa.Text(),
                existing_type=sa.String(length=128),
                existing_nullable=True,
            )
    op.execute(SERIES)


def downgrade() -> None:
    op.execute("DROP VIEW metric_series")
    for table in reversed(TABLES):
        with op.batch_alter_table(table, schema=None) as batch:
            batch.alter_column(
                "undefined_reason",
                type_=sa.String(length=128),
                existing_type=sa.Text(),
                existing_nullable=True,
            )
    op.execute(SERIES)
