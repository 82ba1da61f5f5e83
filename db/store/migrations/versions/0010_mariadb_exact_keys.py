"""MariaDB/MySQL as audit store and source: exact (binary, no-pad) text in keys.

On MariaDB/MySQL the default collations compare without case and trailing spaces, so the unique
key (model_id, prediction_id) would take "A1" and "a1" for one prediction. A store built by
``biasaudit db upgrade`` already has these types (db.store.models.KeyText, db.store.migrate builds
MariaDB stores from the models at head); this migration sets them on any older MariaDB/MySQL store.
Other databases compare text exactly already: nothing to do there.

Revision ID: 0010
Revises: 0012
Create Date: 2026-11-22 09:30:00
"""

from alembic import op

revision = "0010"
down_revision = "0012"
branch_labels = None
depends_on = None

EXACT = "utf8mb4_nopad_bin"


def upgrade() -> None:
    if op.get_bind().dialect.name not in {"mysql", "mariadb"}:
        return
    op.execute(
        "ALTER TABLE predictions "
        f"MODIFY prediction_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE {EXACT} NOT NULL, "
        f"MODIFY model_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE {EXACT} NOT NULL, "
        "MODIFY predicted_at DATETIME(6) NOT NULL"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name not in {"mysql", "mariadb"}:
        return
    op.execute(
        "ALTER TABLE predictions MODIFY prediction_id VARCHAR(128) NOT NULL, "
        "MODIFY model_id VARCHAR(128) NOT NULL, MODIFY predicted_at DATETIME NOT NULL"
    )
