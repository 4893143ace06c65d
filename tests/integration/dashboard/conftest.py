"""The dashboard's fixtures (a seeded queue on every database, the app, an operator's client)
for the in-process HTTP tests."""

from tests.support.dashboard.fixtures import app, operator, seeded

__all__ = ["app", "operator", "seeded"]
