"""Alembic history of the sample's results database."""
