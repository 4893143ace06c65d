"""Running the shared statements on MariaDB: what it lacks, done in the same transaction with
what it has.

The shared operations (:mod:`caravel.store.base` and its parts) are written in portable
SQLAlchemy Core, for databases that can return the rows an ``UPDATE`` changed. MariaDB returns
rows from ``INSERT`` and ``DELETE`` but not from ``UPDATE``, so an ``UPDATE ... RETURNING`` runs
as three statements under the row locks of the first:

1. ``SELECT`` the keys of the rows the update's ``WHERE`` matches, ``FOR UPDATE``;
2. the ``UPDATE`` of those rows, by key (they are locked, and matched the ``WHERE`` when read);
3. ``SELECT`` the returned columns of those rows: their values after the update, as
   ``RETURNING`` gives them.

A claim picks its rows with ``FOR UPDATE SKIP LOCKED`` as a statement of its own
(:class:`Picked`): MariaDB takes neither ``LIMIT`` inside ``IN (...)`` nor a locking read as a
subquery that skips locks. An upsert is an :class:`~caravel.store.mariadb.upserts.Upsert`.

Each of these is a plan (:mod:`caravel.store.plans`) of plain statements
(:func:`expansion`), so it runs the same on the store's connections (:class:`MariaConnection`)
and inside a plan on a connection the caller owns (:func:`expanded`, for
``enqueue(..., session=...)``). After any statement of the store's that changes jobs, the
releases the jobs table's trigger asked for are made (:mod:`~caravel.store.mariadb.releases`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine.result import IteratorResult, SimpleResultMetaData
from sqlalchemy.ext.asyncio import AsyncConnection

from caravel.errors import StoreError
from caravel.store.mariadb.releases import ASKED, make_releases, releases_asked
from caravel.store.mariadb.upserts import KEYS, PROPOSED, Upsert
from caravel.store.plans import Plan, Step, run_plan
from caravel.store.schema import jobs

__all__ = ["PICKED", "MariaConnection", "Picked", "expanded", "expansion"]

T = TypeVar("T")

#: The bound list of ids a :class:`Picked` claim's update takes.
PICKED = "mariadb_picked"
_KEYS = "mariadb_keys"


@dataclass(frozen=True)
class Picked:
    """A claim in two statements: ``picks`` (each a locking read of ids, tried in order until
    ``limit`` ids are found, the limit bound as ``limit_param``), then ``update`` of the ids
    picked (bound as :data:`PICKED`), returning what it returns."""

    picks: tuple[sa.Select[Any], ...]
    update: sa.Update
    limit_param: str = "b_limit"


@dataclass(frozen=True)
class _Emulated:
    """An ``UPDATE ... RETURNING`` as MariaDB runs it (see the module's docstring)."""

    lock: sa.Select[Any]
    update: sa.Update
    read: sa.Select[Any]


def _without_returning(update: sa.Update, keys: sa.ColumnElement[bool]) -> sa.Update:
    plain = update._generate()
    plain._returning = ()
    plain._where_criteria = ()
    return plain.where(keys)


def _returning(update: sa.Update) -> tuple[Any, ...]:
    """What the read after ``update`` selects: its returned columns and, for the jobs table,
    whether its rows asked for releases (the session variable the release trigger sets), so
    finding out costs no statement of its own."""
    asked = (ASKED,) if update.table is jobs else ()
    return (*update._returning, *asked)


def _emulated(update: sa.Update) -> _Emulated:
    table = update.table
    assert isinstance(table, sa.Table)
    keys = list(table.primary_key.columns)
    bound: sa.BindParameter[Any] = sa.bindparam(_KEYS, expanding=True)
    picked = keys[0].in_(bound) if len(keys) == 1 else sa.tuple_(*keys).in_(bound)
    lock = sa.select(*keys)
    if update.whereclause is not None:
        lock = lock.where(update.whereclause)
    read = sa.select(*_returning(update)).where(picked)
    return _Emulated(lock.with_for_update(), _without_returning(update, picked), read)


def _picked_update(update: sa.Update) -> _Emulated:
    """The update of a :class:`Picked` claim: its rows are locked by the pick already."""
    table = update.table
    assert isinstance(table, sa.Table)
    picked = table.c.id.in_(sa.bindparam(PICKED, expanding=True))
    read = sa.select(*_returning(update)).where(picked)
    return _Emulated(sa.select(table.c.id), _without_returning(update, picked), read)


#: What each statement runs as, built on its first run and kept while it lives.
_RUN_AS: weakref.WeakKeyDictionary[Any, _Emulated] = weakref.WeakKeyDictionary()


def _run_as(statement: sa.Update, build: Callable[[sa.Update], _Emulated]) -> _Emulated:
    found = _RUN_AS.get(statement)
    if found is None:
        found = _RUN_AS[statement] = build(statement)
    return found


def _update_plan(statement: sa.Update, parameters: dict[str, Any]) -> Plan[list[Any]]:
    emulated = _run_as(statement, _emulated)
    keys = [tuple(row) for row in (yield Step(emulated.lock, parameters))]
    found: list[Any] = [key[0] for key in keys] if keys and len(keys[0]) == 1 else keys
    bound = {**parameters, _KEYS: found}
    if not found:
        return []
    yield Step(emulated.update, bound)
    return (yield Step(emulated.read, bound))


#: How often an upsert looks for its row again after another transaction inserted it first.
_UPSERT_TRIES = 3


def _upsert_plan(upsert: Upsert, parameters: dict[str, Any]) -> Plan[list[Any]]:
    # The row's values, bound under other names too: an UPDATE given a parameter named after
    # one of its table's columns would set that column.
    columns = upsert.update.table.c
    proposed = {
        (f"{PROPOSED}{name}" if name in columns else name): value
        for name, value in parameters.items()
    }
    for _ in range(_UPSERT_TRIES):
        found = yield Step(upsert.probe, proposed)
        if found:
            keys = [row[0] if len(row) == 2 else tuple(row[:-1]) for row in found if row.ok]
            if not keys:
                return []
            bound = {**proposed, KEYS: keys}
            yield Step(upsert.update, bound)
            return (yield Step(upsert.read, bound))
        inserted = yield Step(upsert.insert, parameters)
        if inserted:
            return inserted
    raise StoreError("upsert", "the row it settles kept appearing and going; try again")


def _picked_plan(picked: Picked, parameters: dict[str, Any]) -> Plan[list[Any]]:
    limit = int(parameters[picked.limit_param])
    ids: list[Any] = []
    for pick in picked.picks:
        if len(ids) >= limit:
            break
        ids += [row[0] for row in (yield Step(pick, parameters))]
    ids = ids[:limit]
    if not ids:
        return []
    emulated = _run_as(picked.update, _picked_update)
    bound = {**parameters, PICKED: ids}
    yield Step(emulated.update, bound)
    claimed = yield Step(emulated.read, bound)
    # In the order they were picked, as an UPDATE ... RETURNING of them returns them.
    order = {job_id: n for n, job_id in enumerate(ids)}
    return sorted(claimed, key=lambda row: order[row.id])


def _returned(statement: Any) -> list[str]:
    """The names of the columns ``statement``'s rows have."""
    if isinstance(statement, Picked):
        statement = statement.update
    elif isinstance(statement, Upsert):
        statement = statement.insert
    return list(statement.exported_columns.keys())


def expansion(statement: Any, parameters: Any) -> Plan[list[Any]] | None:
    """The plan of plain statements ``statement`` runs as on MariaDB, or ``None`` for one
    that runs as it is."""
    if isinstance(statement, Picked):
        return _picked_plan(statement, parameters or {})
    if isinstance(statement, Upsert):
        return _upsert_plan(statement, parameters or {})
    if isinstance(statement, sa.Update) and statement._returning:
        if isinstance(parameters, list):
            raise TypeError("an UPDATE ... RETURNING runs with one set of parameters on MariaDB")
        return _update_plan(statement, parameters or {})
    return None


def expanded(plan: Plan[T]) -> Plan[T]:
    """``plan`` with each statement MariaDB cannot run as it is replaced by its expansion."""
    rows: list[Any] | None = None
    try:
        while True:
            step = plan.send(rows) if rows is not None else next(plan)
            inner = expansion(step.statement, step.parameters)
            rows = (yield step) if inner is None else (yield from inner)
    except StopIteration as done:
        value: T = done.value
        return value


class MariaConnection:
    """A connection inside one of the store's transactions, running the shared statements the
    way MariaDB can (see the module's docstring)."""

    __slots__ = ("conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def execute(self, statement: Any, parameters: Any = None, /) -> sa.Result[Any]:
        inner = expansion(statement, parameters)
        result: sa.Result[Any]
        if inner is None:
            result = await self.conn.execute(statement, parameters)
            asked = _changes_jobs(statement) and await releases_asked(self.conn)
        else:
            rows = [tuple(row) for row in await run_plan(self.conn.execute, inner)]
            names = _returned(statement)
            # An update of jobs read whether it asked for releases with its rows (none: no
            # row changed, no trigger fired).
            asked = _changes_jobs(statement) and any(row[len(names)] for row in rows)
            result = IteratorResult(
                SimpleResultMetaData(names), iter(r[: len(names)] for r in rows)
            )
        if asked:
            await make_releases(self.conn)
        return result

    async def exec_driver_sql(self, sql: str, parameters: Any = None) -> sa.Result[Any]:
        return await self.conn.exec_driver_sql(sql, parameters)


def _changes_jobs(statement: Any) -> bool:
    """Whether ``statement`` may change a job's state (and so fire the release trigger)."""
    if isinstance(statement, Picked):
        return True
    return isinstance(statement, sa.Update) and statement.table is jobs
