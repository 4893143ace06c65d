"""Cancellation and deletion on an operator's word: :mod:`~caravel.store.removal.selection` holds
what a bulk operation selects, which states it may touch and the protocol every store implements,
re-exported here; :mod:`~caravel.store.removal.statements` holds the statements and operations of
the SQL stores. Only the selection is imported here, so naming it loads no SQLAlchemy."""

from caravel.store.removal.selection import CANCELLABLE, DELETABLE, JobSelection, RemovalStore

__all__ = ["CANCELLABLE", "DELETABLE", "JobSelection", "RemovalStore"]
