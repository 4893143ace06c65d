"""Alembic history of the backend's own tables (version table ``alembic_version``)."""
