"""How SQLAlchemy writes the shared statements for MariaDB, where MariaDB's SQL differs.

MariaDB takes no ``LIMIT`` in a subquery of ``IN (...)`` (error 1235). The shared statements
pick a bounded set of ids that way (the expired leases a claim takes over, the rows a cancel or
a prune takes in one batch), so on MariaDB such a subquery is read through a derived table,
``IN (SELECT * FROM (SELECT ... LIMIT n) AS bounded)``, which MariaDB takes and evaluates once.
The claim's order, :data:`~caravel.store.schema.claim_rank`, is written as the jobs table's
generated column of the same name, which ``ix_caravel_jobs_ranked`` holds (MariaDB does not
match an expression to a generated column), and a SELECT ordered by it is ordered by the job's
``seq`` next: jobs of equal rank are claimed in the order they were inserted, as on the other
databases, not in the order of their random ids. Where a read carries the rank on as its
claim order ``k`` (to be sorted again after a union), ``k`` is the rank and the ``seq`` in one
exact number (``rank * 10^19 + seq``), so every later sort by it keeps that order too. A cast
to a UUID (the typed NULLs of a union's branches) is written as its operand: SQLAlchemy's MySQL
dialect has no such cast and would warn at every statement. The job pending under a key
(:class:`~caravel.store.inserts.pending.PendingUnder`) is the row whose generated column
``pending_ready`` holds the key: an entry of ``uq_caravel_jobs_pending``, which the predicate
the other databases write (a key and the ready state) would not find.

Importing this module registers the rewrites (the MariaDB store does).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import BinaryExpression, Cast, Grouping, Label
from sqlalchemy.sql.selectable import ScalarSelect

from caravel.store.inserts.pending import PendingUnder
from caravel.store.schema import JOBS_TABLE, claim_rank

__all__: list[str] = []

_IN = (operators.in_op, operators.not_in_op)


def _limited_select(element: Any) -> sa.Select[Any] | None:
    """The SELECT with a LIMIT that ``element`` (an ``IN``'s right side) is, if any."""
    while isinstance(element, (Grouping, ScalarSelect)):
        element = element.element
    if isinstance(element, sa.Select) and element._limit_clause is not None:
        return element
    return None


_SEQ: sa.ColumnElement[Any] = sa.literal_column(f"{JOBS_TABLE}.seq")


@compiles(sa.Select, "mariadb")
def _select(element: sa.Select[Any], compiler: Any, **kw: Any) -> str:
    order = element._order_by_clauses
    if any(clause is claim_rank for clause in order):
        ordered: list[Any] = []
        for clause in order:
            ordered += [clause, _SEQ] if clause is claim_rank else [clause]
        element = element._generate()
        element._order_by_clauses = tuple(ordered)
    text: str = compiler.visit_select(element, **kw)
    return text


#: ``seq`` stays below this (it is a BIGINT UNSIGNED), so rank and seq never overlap in ``k``.
_SEQ_SPAN = 10**19


@compiles(Label, "mariadb")
def _label(element: Label[Any], compiler: Any, **kw: Any) -> str:
    if element.element is claim_rank and element.name == "k":
        rank = f"CAST({JOBS_TABLE}.claim_rank AS DECIMAL(40, 0))"
        ordered: sa.ColumnElement[Any] = sa.literal_column(
            f"{rank} * {_SEQ_SPAN} + {JOBS_TABLE}.seq"
        )
        element = ordered.label("k")
    text: str = compiler.visit_label(element, **kw)
    return text


@compiles(BinaryExpression, "mariadb")
def _binary(element: BinaryExpression[Any], compiler: Any, **kw: Any) -> str:
    if element is claim_rank:
        return f"{compiler.preparer.quote(JOBS_TABLE)}.claim_rank"
    if element.operator in _IN:
        limited = _limited_select(element.right)
        if limited is not None:
            bounded = limited.subquery("bounded")
            wrapped = sa.select(*bounded.c).scalar_subquery()
            element = BinaryExpression(
                element.left, wrapped.self_group(), element.operator, type_=element.type
            )
    text: str = compiler.visit_binary(element, **kw)
    return text


@compiles(Cast, "mariadb")
def _cast(element: Cast[Any], compiler: Any, **kw: Any) -> str:
    if isinstance(element.type, sa.Uuid):
        text: str = compiler.process(element.clause, **kw)
        return text
    text = compiler.visit_cast(element, **kw)
    return text


@compiles(PendingUnder, "mariadb")
def _pending_under(element: PendingUnder, compiler: Any, **kw: Any) -> str:
    ready_key = sa.column("pending_ready", sa.String(128), _selectable=element.table)
    text: str = compiler.process(ready_key == element.value, **kw)
    return text
