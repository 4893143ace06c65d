"""Concurrency and rate limits in the SQL stores, shared by every dialect: the rules every store
keeps (:mod:`~caravel.store.limited.rules`), the statements over a queue's settings
(:mod:`~caravel.store.limited.tables`) and its log of starts
(:mod:`~caravel.store.limited.starts`), the usage read (:mod:`~caravel.store.limited.usage`),
the limited claim (:mod:`~caravel.store.limited.claim`) and the operations that run them
(:mod:`~caravel.store.limited.store`).

A limited claim runs in one transaction that first reads the queue's limits row, locked where
the database has concurrent writers (PostgreSQL: ``FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE``
already makes every write wait its turn). So the limited claims of one queue take turns, each
counts the running jobs only after the one before it committed, and none can take a slot
another already took: the count and the claim are exact together. A queue without a row takes
no lock and is claimed by the plain statement; one whose row went since the worker looked is
claimed by the plain statement inside the transaction.

A queue with a rate is claimed in the same turn by one read and a write or two
(:mod:`~caravel.store.limited.rated_reads`): the read brings the latest and oldest logged
starts, the weights started per key within the window, the running jobs per partition key and
the first due jobs with their keys and weights; :func:`caravel.flow.window.fit` chooses among
them, the chosen still due are claimed, and one start per key now running is logged. The
window ends at the claim's clock or the latest logged start, whichever is later
(:func:`~caravel.flow.window.window_clock`): a claim whose clock was read before a later one
took its turn still counts every start inside its window, and starts logged by a claim whose
clock ran ahead still count (the window has no upper end), so a skewed clock can only make the
queue slower, never faster. Leases, though, are judged by the claim's own clock, as everywhere:
a later logged start never makes a lease live by that clock look expired. Once the oldest
start is a whole period older than any window can reach, the claim deletes those
(:func:`~caravel.flow.window.stale_before`).

A fair queue's claims (``fair`` on its row) run the same way, with
:func:`~caravel.store.claims.claim_fair` as the statement: its weights are read by the claim
itself, so a change to them is kept by the next claim. A fair queue with a rate is claimed as a
queue with a rate, its due jobs put in fair order (:func:`caravel.flow.fairness.fair_order`)
before :func:`~caravel.flow.window.fit` chooses among them.
"""

from __future__ import annotations

from caravel.store.limited.rules import (
    MAX_USAGE_KEYS,
    check_rate_fits,
    checked_limit,
    checked_usage,
    key_startable,
    stored_fields,
    waiting,
)
from caravel.store.limited.store import LimitsStore

__all__ = [
    "MAX_USAGE_KEYS",
    "LimitsStore",
    "check_rate_fits",
    "checked_limit",
    "checked_usage",
    "key_startable",
    "stored_fields",
    "waiting",
]
