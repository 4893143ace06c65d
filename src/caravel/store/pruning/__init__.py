"""Retention's pruning: :mod:`~caravel.store.pruning.requests` holds the parameters and result of
one prune batch, re-exported here; :mod:`~caravel.store.pruning.plan` holds the batch itself as a
plan for the SQL stores. Only the requests are imported here, so naming them loads no
SQLAlchemy."""

from caravel.store.pruning.requests import PruneBatch, PruneRequest

__all__ = ["PruneBatch", "PruneRequest"]
