"""Which revisions run on which database.

MariaDB joined at revision ``0016``, which creates its whole schema at once: the revisions
before it were written for PostgreSQL and SQLite, describe intermediate shapes no MariaDB queue
ever had, and do nothing there (:func:`before_mariadb`); ``0016`` does nothing on the others.
A downgrade counts the losses of the steps that run on its database only (:func:`runs_on`): on
MariaDB, ``0016``'s own downgrade takes everything.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from alembic import op

__all__ = ["FIRST_MARIADB_REVISION", "before_mariadb", "runs_on"]

#: The revision that creates MariaDB's schema; every later one runs on all three databases.
FIRST_MARIADB_REVISION = "0016"


def runs_on(revision: str, dialect: str) -> bool:
    """Whether ``revision``'s steps run on a database of ``dialect`` (SQLAlchemy's name)."""
    if revision == FIRST_MARIADB_REVISION:
        return dialect == "mariadb"
    return dialect != "mariadb" or revision > FIRST_MARIADB_REVISION


def before_mariadb(step: Callable[[], None]) -> Callable[[], None]:
    """A revision's ``upgrade`` or ``downgrade`` from before MariaDB joined: skipped there."""

    @functools.wraps(step)
    def run() -> None:
        if op.get_bind().dialect.name != "mariadb":
            step()

    return run
