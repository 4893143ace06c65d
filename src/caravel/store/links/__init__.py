"""Chains and batches: :mod:`~caravel.store.links.records` holds what the store takes and returns
for them (plain values, and the protocols every store implements), re-exported here;
:mod:`~caravel.store.links.statements` holds their operations on the SQL stores. Only the records
are imported here, so naming them loads no SQLAlchemy."""

from caravel.store.links.records import BatchRecord, LinkedJob, LinkReads, LinkWrites, NewBatch

__all__ = ["BatchRecord", "LinkReads", "LinkWrites", "LinkedJob", "NewBatch"]
