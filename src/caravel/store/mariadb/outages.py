"""Which MariaDB errors mean the server is unreachable for now (an outage a worker waits out,
see :attr:`StoreError.outage <caravel.errors.StoreError>`) rather than an operation that is
wrong.

* the connection was lost or could not be made: client errors 2002 and 2003 (cannot connect),
  2006 (server has gone away), 2013 and 2055 (lost connection during a query);
* the server is going away: 1053 (shutdown in progress), 1927 (the connection was killed,
  ``KILL CONNECTION``);
* the server takes no writes: 1290 (running with ``read_only``, as a demoted primary or a
  replica does) and 1836 (read-only mode).

Not outages: deadlocks and lock wait timeouts (the store retries them), duplicate keys, data
errors, missing tables, a query killed on its own (1317): waiting does not make them go away.
"""

from __future__ import annotations

from caravel.store.errors import lost_connection

__all__ = ["is_outage"]

_OUTAGE_NUMBERS = frozenset({2002, 2003, 2006, 2013, 2055, 1053, 1927, 1290, 1836})


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver error, wrapped by SQLAlchemy or not) is an outage."""
    if lost_connection(exc):
        return True
    args: tuple[object, ...] = getattr(getattr(exc, "orig", None) or exc, "args", ())
    number = args[0] if args else None
    return isinstance(number, int) and number in _OUTAGE_NUMBERS
