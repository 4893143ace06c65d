"""Inserting jobs on the SQL stores, one module per part: :mod:`~caravel.store.inserts.general`
(the general insert every dialect can take, and the same insert as a plan),
:mod:`~caravel.store.inserts.pending` ("one pending per key"), :mod:`~caravel.store.inserts.caller`
(the operations that insert in a transaction the caller owns) and
:mod:`~caravel.store.inserts.sessions` (the caller's sessions and connections as plans run on
them, imported only when a caller passes one, with the ORM). Nothing is imported here, so each
part loads only what it needs."""
