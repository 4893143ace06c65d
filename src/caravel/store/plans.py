"""Operations written once for every kind of connection.

An operation that must run both on the store's own connections and on a connection the caller
owns (``enqueue(..., session=...)``) is written as a *plan*: a generator that yields each
statement with its parameters and is sent the statement's rows. :func:`run_plan` drives a plan
on an async connection, :func:`run_plan_sync` on a blocking one, so the SQL, the idempotency
lookup and the conflict rule exist once, whichever side of the sync/async line the caller is on.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, NamedTuple, TypeVar

__all__ = ["Plan", "Step", "run_plan", "run_plan_sync"]

T = TypeVar("T")


class Step(NamedTuple):
    """One statement of a plan and its parameters: a dict, a list of dicts (one execution per
    dict, as ``executemany``), or ``None``."""

    statement: Any
    parameters: Any = None


#: An operation written once for every kind of connection: it yields :class:`Step` objects and
#: is sent each step's rows (objects with attribute access, as SQLAlchemy rows).
Plan = Generator[Step, list[Any], T]


async def run_plan(execute: Callable[[Any, Any], Any], plan: Plan[T]) -> T:
    """Drive ``plan`` with ``execute(statement, parameters)``, an async call returning a
    SQLAlchemy result (a connection's ``execute``)."""
    rows: list[Any] | None = None
    try:
        while True:
            step = plan.send(rows) if rows is not None else next(plan)
            result = await execute(step.statement, step.parameters)
            rows = list(result.all()) if getattr(result, "returns_rows", True) else []
    except StopIteration as done:
        value: T = done.value
        return value


def run_plan_sync(execute: Callable[[Any, Any], Any], plan: Plan[T]) -> T:
    """:func:`run_plan` for a blocking ``execute``."""
    rows: list[Any] | None = None
    try:
        while True:
            step = plan.send(rows) if rows is not None else next(plan)
            result = execute(step.statement, step.parameters)
            rows = list(result.all()) if getattr(result, "returns_rows", True) else []
    except StopIteration as done:
        value: T = done.value
        return value
