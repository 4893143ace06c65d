"""Which PostgreSQL errors mean the server is unreachable for now (an outage a worker waits out,
see :attr:`StoreError.outage <caravel.errors.StoreError>`) rather than an operation that is
wrong.

* the connection was lost or could not be made: SQLSTATE class 08, or psycopg's own
  ``OperationalError`` with no SQLSTATE (refused, reset, closed by the server, a multi-host URL
  finding no host that takes writes yet) and ``InterfaceError`` (a connection already closed);
* the server is going away or not there yet: ``57P01`` admin shutdown (``pg_terminate_backend``,
  a fast shutdown), ``57P02`` crash shutdown, ``57P03`` cannot connect now (starting up,
  recovering), ``57P05`` idle session timeout;
* ``25006`` read-only transaction: the session reached a server that no longer takes writes
  (a demoted primary, a standby during a failover, ``default_transaction_read_only``).

Not outages: serialization failures and deadlocks (the store retries a deadlock itself), a
statement or lock timeout, constraint and data errors, missing tables: none of them goes away
by waiting for the server.
"""

from __future__ import annotations

import psycopg

from caravel.store.errors import lost_connection

__all__ = ["is_outage"]

_OUTAGE_STATES = frozenset({"57P01", "57P02", "57P03", "57P05", "25006"})


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver error, wrapped by SQLAlchemy or not) is an outage."""
    if lost_connection(exc):
        return True
    orig = getattr(exc, "orig", None) or exc
    state = getattr(orig, "sqlstate", None)
    if state is not None:
        return state in _OUTAGE_STATES or state.startswith("08")
    return isinstance(orig, (psycopg.OperationalError, psycopg.InterfaceError))
