"""The test's settings on every tested row: detection_results and planning_results gain
``tolerance`` and ``alpha``, so that a stored row says which hypothesis it tested and at which
level without the run's configuration (whose defaults may change).

Rows stored before hold the run's configured values, read from audit_runs.config; where the
configuration left them unset, the defaults of the time (tolerance 0.05, alpha 0.05).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 10:40:00
"""

import json

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

TABLES = ("detection_results", "planning_results")
DEFAULTS = {"tolerance": 0.05, "alpha": 0.05}  # schemas.config.Thresholds at this revision
# a double on MariaDB/MySQL too (db.store.models.Real), where Float alone is single-precision FLOAT
REAL = sa.Float().with_variant(mysql.DOUBLE(asdecimal=False), "mysql", "mariadb")


def _settings(config) -> dict[str, float]:
    if isinstance(config, str):
        config = json.loads(config)
    given = (config or {}).get("thresholds") or {}
    return {name: float(given.get(name, default)) for name, default in DEFAULTS.items()}


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch:
            for name in DEFAULTS:
                batch.add_column(sa.Column(name, REAL, nullable=True))
    bind = op.get_bind()
    runs = sa.table("audit_runs", sa.column("id"), sa.column("config"))
    for run_id, config in bind.execute(sa.select(runs.c.id, runs.c.config)).all():
        for table in TABLES:
            rows = sa.table(table, sa.column("run_id"), *map(sa.column, DEFAULTS))
            bind.execute(rows.update().where(rows.c.run_id == run_id).values(_settings(config)))
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch:
            for name in DEFAULTS:
                batch.alter_column(name, existing_type=REAL, nullable=False)


def downgrade() -> None:
    for table in reversed(TABLES):
        with op.batch_alter_table(table, schema=None) as batch:
            for name in reversed(list(DEFAULTS)):
                batch.drop_column(name)
