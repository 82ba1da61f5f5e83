"""Database layer: typed models, engine set-up, Alembic migrations, run persistence and history queries."""
