"""Caravel's own Alembic migration history (version table ``caravel_alembic_version``)."""
