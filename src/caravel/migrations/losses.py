"""What a downgrade takes with it: the rows it deletes and the jobs it strands.

Each revision module names, in ``LOSSES``, the kinds of rows its ``downgrade()`` deletes or
changes for good, each with the statement that counts them. Before a downgrade's first step
runs, :func:`count_losses` counts every kind of every step it will take, in the downgrade's own
transaction, so nothing changes between the count and the change: on PostgreSQL it first locks
the tables it counts (the steps' DDL takes the same locks anyway), on SQLite the transaction
began with ``BEGIN IMMEDIATE``. :func:`caravel.migrate.downgrade` refuses when anything was
counted, unless it was forced.

The counts are per step: a job a step dead-letters is a job a later step (``0001``, which drops
the table) deletes again, and both say so. Kinds are named once across the whole history.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import sqlalchemy as sa

__all__ = ["Loss", "LossKind", "count_losses", "describe"]

Fate = Literal["deleted", "dead_lettered", "resumed"]

#: Each fate in words: what a refusal says a step would do, and what the report says it did.
_WORDS: dict[Fate, tuple[str, str]] = {
    "deleted": ("delete", "deleted"),
    "dead_lettered": ("dead-letter", "dead-lettered"),
    "resumed": ("resume", "resumed"),
}


@dataclass(frozen=True, slots=True)
class LossKind:
    """A kind of row a revision's downgrade takes: its name (``cancelled_jobs``), the words for
    one and for several, what happens to each (``fate``), the tables ``count`` reads, and
    ``count``, a statement returning how many there are. ``count`` may only name tables and
    columns of its own revision or earlier, which every later revision still has."""

    name: str
    one: str
    many: str
    fate: Fate
    tables: tuple[str, ...]
    count: str


@dataclass(frozen=True, slots=True)
class Loss:
    """Rows one step of a downgrade takes: ``revision`` is the step (the revision removed),
    ``kind`` the kind's name, ``rows`` how many, ``fate`` what happens to them (``deleted``,
    ``dead_lettered`` or ``resumed``) and ``noun`` the kind in words."""

    revision: str
    kind: str
    rows: int
    fate: Fate
    noun: str

    def __str__(self) -> str:
        """What went, in words: ``dead-lettered 2 held chain steps (0009)``."""
        return f"{_WORDS[self.fate][1]} {self.rows} {self.noun} ({self.revision})"


def count_losses(
    conn: sa.Connection, steps: Sequence[tuple[str, Iterable[LossKind]]]
) -> list[Loss]:
    """Count each kind of each step, ``(revision, its LOSSES)`` in the order the steps run;
    only kinds with rows are returned."""
    planned = [(revision, kind) for revision, kinds in steps for kind in kinds]
    if conn.dialect.name == "postgresql":
        # Writers wait from here to the commit; the steps' DDL would take these locks anyway.
        # The jobs table first, as a finishing job takes it before its batch's row.
        tables = {table for _, kind in planned for table in kind.tables}
        for table in sorted(tables, key=lambda name: (name != "caravel_jobs", name)):
            conn.exec_driver_sql(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
    found = []
    for revision, kind in planned:
        rows = int(conn.exec_driver_sql(kind.count).scalar_one())
        if rows:
            noun = kind.one if rows == 1 else kind.many
            found.append(Loss(revision, kind.name, rows, kind.fate, noun))
    return found


def describe(losses: Sequence[Loss]) -> str:
    """What ``losses`` would do, in words: ``dead-letter 2 held chain steps, delete 3 cancelled
    jobs``."""
    return ", ".join(f"{_WORDS[loss.fate][0]} {loss.rows} {loss.noun}" for loss in losses)
