"""A plan (:mod:`caravel.store.plans`) run straight on psycopg, for the limited claim: the same
SQLAlchemy statements, compiled once each, executed on one of the store's hot connections in a
transaction of its own. Through SQLAlchemy the limited claim's transaction cost about as much
again as its statements (a claim of 476 jobs: 27-32 ms against the plain claim's 15-17 ms,
whose one statement already went this way; ``python -m bench.claim_times``).

Two kinds of parameter are written into SQL text by SQLAlchemy only when it executes: one it
renders as a literal (``literal_execute``, a claim's batch size) and a list it expands into one
placeholder per item (``expanding``, the ids a claim chose). Here the first is written into the
text at each execution (an integer, so the planner sees how few rows a claim reads, as the
plain claim's does), and the second is sent as one array (``= ANY(...)``), so the text is the
same whatever the list's length.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import sqlalchemy as sa
from psycopg.rows import namedtuple_row

from caravel.store.plans import Plan
from caravel.store.postgresql.statements import compile_for_driver

__all__ = ["DriverStatement", "compile_statement", "run_plan_on_driver"]

T = TypeVar("T")

_POSTCOMPILE = re.compile(r"__\[POSTCOMPILE_(\w+)\]")
_BINARY_PLACEHOLDER = re.compile(r"%\((\w+)\)b")


@dataclass(frozen=True, slots=True)
class DriverStatement:
    """A statement's text for psycopg with its defaults, and the names of its parameters
    written into the text at each execution."""

    text: str
    defaults: dict[str, Any]
    literal: tuple[str, ...]

    def bound(self, values: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """The text and parameters for one execution with ``values``."""
        params = {**self.defaults, **values}
        text = self.text
        for name in self.literal:
            # Only integers are written into the text, never a string from a caller.
            text = text.replace(f"__[POSTCOMPILE_{name}]", str(int(params.pop(name))))
        return text, params


def compile_statement(statement: Any, dialect: sa.Dialect) -> DriverStatement:
    """``statement`` for :func:`run_plan_on_driver`: its expanding parameters as arrays, its
    literal ones left to write at each execution."""
    text, defaults = compile_for_driver(statement, dialect)
    compiled = statement.compile(dialect=dialect)
    literal: list[str] = []
    for name in set(_POSTCOMPILE.findall(text)):
        bind = compiled.binds[name]
        if bind.expanding:
            if isinstance(bind.type, sa.TupleType):
                raise TypeError(f"a tuple list ({name}) cannot be sent as one array")
            placeholder = f"__[POSTCOMPILE_{name}]"
            text = text.replace(f"NOT IN ({placeholder})", f"<> ALL(%({name})b)")
            text = text.replace(f"IN ({placeholder})", f"= ANY(%({name})b)")
            if placeholder in text:
                raise TypeError(f"an expanding parameter ({name}) outside IN (...)")
        else:
            literal.append(name)
    return DriverStatement(text, defaults, tuple(sorted(literal)))


async def run_plan_on_driver(
    driver: psycopg.AsyncConnection[Any],
    plan: Plan[T],
    statement_of: Callable[[Any], DriverStatement],
) -> T:
    """Drive ``plan`` on ``driver`` in a transaction of its own, committed when the plan ends
    and rolled back if it fails: each step's statement as ``statement_of`` compiles it,
    prepared by the server on first use, its rows with attribute access as SQLAlchemy's have.
    A step with a list of parameters runs once per item.

    The ``BEGIN`` travels with the first step (see :func:`_begin_with`), so the transaction
    costs no round trip of its own: ``driver`` is in autocommit mode and idle."""
    try:
        value = await _drive(driver, plan, statement_of)
    except BaseException:
        if not driver.broken:
            await driver.rollback()
        raise
    await driver.commit()
    return value


async def _begin_with(
    driver: psycopg.AsyncConnection[Any], compiled: DriverStatement, values: Mapping[str, Any]
) -> list[Any]:
    """``BEGIN`` and the statement ``compiled`` binds with ``values``, sent as one message
    (the simple query protocol, its parameters bound client-side, by psycopg's quoting); the
    statement's rows."""
    text, params = compiled.bound(values)
    text = "BEGIN; " + _BINARY_PLACEHOLDER.sub(r"%(\1)s", text)
    async with psycopg.AsyncClientCursor(driver, row_factory=namedtuple_row) as cursor:
        await cursor.execute(text, params)
        cursor.nextset()  # past BEGIN's result
        return await cursor.fetchall() if cursor.description is not None else []


async def _drive(
    driver: psycopg.AsyncConnection[Any],
    plan: Plan[T],
    statement_of: Callable[[Any], DriverStatement],
) -> T:
    rows: list[Any] | None = None
    try:
        while True:
            step = plan.send(rows) if rows is not None else next(plan)
            compiled = statement_of(step.statement)
            if rows is None:
                if isinstance(step.parameters, list):
                    raise TypeError("a plan's first step takes one set of parameters")
                rows = await _begin_with(driver, compiled, step.parameters or {})
                continue
            async with driver.cursor(binary=True, row_factory=namedtuple_row) as cursor:
                if isinstance(step.parameters, list):
                    bound = [compiled.bound(values) for values in step.parameters]
                    texts = {text for text, _ in bound}
                    for text in texts:  # one text unless a literal parameter differs
                        batch = [params for each, params in bound if each == text]
                        await cursor.executemany(text, batch)
                    rows = []
                    continue
                text, params = compiled.bound(step.parameters or {})
                await cursor.execute(text, params, prepare=True)
                rows = await cursor.fetchall() if cursor.description is not None else []
    except StopIteration as done:
        value: T = done.value
        return value
