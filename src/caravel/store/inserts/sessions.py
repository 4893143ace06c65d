"""Connections the caller owns, for work inside the application's own transaction (an insert,
``enqueue(..., session=...)``; a handler's completion, ``ctx.complete_in(session)``):
SQLAlchemy sessions and connections, sync or async, and DB-API connections of psycopg and
``sqlite3``. Each becomes an ``execute`` a plan (:mod:`caravel.store.plans`) runs on, once it
is found on the queue's own database.

A DB-API connection gets each statement compiled for its dialect, with SQLAlchemy's own bind and
result processing, so a row reads the same on every kind of connection. Imported only when a
caller passes a session, so the ORM costs nothing otherwise. (On MariaDB, a PyMySQL connection
is that DB-API connection.)
"""

from __future__ import annotations

import inspect
from collections import namedtuple
from collections.abc import Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from caravel.errors import ValidationError
from caravel.store.plans import Plan, run_plan, run_plan_sync
from caravel.store.protocol import Committed, InsertOutcome, InsertResult, NewJob
from caravel.store.workflows.records import NewWorkflow

if TYPE_CHECKING:
    from caravel.store.base import SqlStore

__all__ = [
    "CallerConnection",
    "caller_connection",
    "caller_connection_async",
    "insert_async",
    "insert_sync",
    "on_commit_hook",
    "run_joined",
    "run_joined_sync",
    "workflow_async",
    "workflow_sync",
]

T = TypeVar("T")

_SESSION_RULE = (
    "must be a SQLAlchemy Session, AsyncSession, Connection or AsyncConnection, or a psycopg, "
    "PyMySQL or sqlite3 connection, on the queue's own database"
)


class CallerConnection(NamedTuple):
    """The caller's connection as a plan runs on it: an ``execute`` (async or blocking, as
    resolved), the database's dialect name, the SQLAlchemy object a commit hook can be
    attached to (``None`` for a bare connection, which has none), and the ``info`` dictionary
    SQLAlchemy keeps for the pooled connection underneath (``None`` for a DB-API connection),
    where the database it is on is remembered."""

    execute: Callable[[Any, Any], Any]
    dialect: str
    committing: Any = None
    info: dict[Any, Any] | None = None


def caller_connection(target: object) -> CallerConnection:
    """A blocking caller connection: a ``Session`` (its current transaction's connection),
    a ``Connection``, or a DB-API connection of psycopg or ``sqlite3``."""
    if isinstance(target, Session):
        conn = target.connection()
        return CallerConnection(conn.execute, conn.dialect.name, target, conn.info)
    if isinstance(target, sa.Connection):
        return CallerConnection(target.execute, target.dialect.name, None, target.info)
    dbapi = _dbapi(target, asynchronous=False)
    if dbapi is None:
        raise ValidationError("session", _SESSION_RULE)
    return dbapi


async def caller_connection_async(target: object) -> CallerConnection:
    """An async caller connection: an ``AsyncSession``, an ``AsyncConnection`` or an async
    psycopg connection."""
    if isinstance(target, AsyncSession):
        conn = await target.connection()
        return CallerConnection(conn.execute, conn.dialect.name, target.sync_session, conn.info)
    if isinstance(target, AsyncConnection):
        return CallerConnection(target.execute, target.dialect.name, None, target.info)
    dbapi = _dbapi(target, asynchronous=True)
    if dbapi is None:
        raise ValidationError("session", _SESSION_RULE)
    return dbapi


def on_commit_hook(committing: Any, hook: Callable[[], None]) -> bool:
    """Run ``hook`` once after the session ``committing`` commits its transaction (never
    after a rollback); whether a hook could be attached (a session: yes; a bare connection:
    no)."""
    if not isinstance(committing, Session):
        return False
    hooks: list[Callable[[], None]] | None = committing.info.get(_HOOKS)
    if hooks is None:
        hooks = committing.info[_HOOKS] = []
        sa.event.listen(committing, "after_commit", _run_hooks)
        sa.event.listen(committing, "after_rollback", _drop_hooks)
    hooks.append(hook)
    return True


_HOOKS = "caravel.on_commit"


def _run_hooks(session: Session) -> None:
    hooks = session.info.get(_HOOKS) or []
    session.info[_HOOKS] = []
    for hook in hooks:
        hook()


def _drop_hooks(session: Session) -> None:
    session.info[_HOOKS] = []


def run_joined_sync(
    store: SqlStore[Any], target: object, identity: str, plan: Plan[T]
) -> tuple[CallerConnection, T]:
    """Run ``plan`` in the transaction ``target`` (a blocking session or connection) has open,
    after checking that it is on the queue's database (``identity``, from
    :meth:`~caravel.store.base.SqlStore.database_identity`); the connection it ran on and what
    it returned. Nothing is committed here."""
    caller = caller_connection(target)
    _same_kind(store, caller)
    seen = _remembered(caller)
    if seen is None:
        seen = _remember(caller, run_plan_sync(caller.execute, store._identity_plan()))
    _same_database(seen, identity)
    return caller, run_plan_sync(caller.execute, plan)


async def run_joined(
    store: SqlStore[Any], target: object, plan: Plan[T]
) -> tuple[CallerConnection, T]:
    """:func:`run_joined_sync` for an async session or connection; a blocking one is accepted
    too (it runs on the event loop's thread, as the caller's own statements do)."""
    identity = await store.database_identity()
    if not _is_async(target):
        return run_joined_sync(store, target, identity, plan)
    caller = await caller_connection_async(target)
    _same_kind(store, caller)
    seen = _remembered(caller)
    if seen is None:
        seen = _remember(caller, await run_plan(caller.execute, store._identity_plan()))
    _same_database(seen, identity)
    return caller, await run_plan(caller.execute, plan)


def insert_sync(
    store: SqlStore[Any],
    target: object,
    new_jobs: Sequence[NewJob],
    identity: str,
    on_commit: Committed,
) -> InsertResult:
    """Insert ``new_jobs`` in the transaction ``target`` (a blocking session or connection)
    has open (see :func:`run_joined_sync`)."""
    caller, outcomes = run_joined_sync(store, target, identity, store._insert_plan(new_jobs))
    return _inserted(store, caller, new_jobs, outcomes, on_commit)


async def insert_async(
    store: SqlStore[Any], target: object, new_jobs: Sequence[NewJob], on_commit: Committed
) -> InsertResult:
    """:func:`insert_sync` for an async session or connection, or a blocking one."""
    caller, outcomes = await run_joined(store, target, store._insert_plan(new_jobs))
    return _inserted(store, caller, new_jobs, outcomes, on_commit)


def workflow_sync(
    store: SqlStore[Any],
    target: object,
    workflow: NewWorkflow,
    identity: str,
    on_commit: Committed,
) -> tuple[UUID, bool]:
    """Insert ``workflow`` in the transaction ``target`` (a blocking session or connection)
    has open, as :func:`insert_sync` inserts jobs: its id and whether it was created."""
    caller, (found, created) = run_joined_sync(
        store, target, identity, store._workflow_plan(workflow)
    )
    _wake_on_commit(store, caller, workflow, created, on_commit)
    return found, created


async def workflow_async(
    store: SqlStore[Any], target: object, workflow: NewWorkflow, on_commit: Committed
) -> tuple[UUID, bool]:
    """:func:`workflow_sync` for an async session or connection (a blocking one is accepted
    too)."""
    caller, (found, created) = await run_joined(store, target, store._workflow_plan(workflow))
    _wake_on_commit(store, caller, workflow, created, on_commit)
    return found, created


def _wake_on_commit(
    store: SqlStore[Any],
    caller: CallerConnection,
    workflow: NewWorkflow,
    created: bool,
    on_commit: Committed,
) -> None:
    """Attach the wake-ups for a new workflow's steps due at once to the commit of the
    caller's session (as :func:`_inserted` does for jobs)."""
    due = {
        step.job.queue
        for step in workflow.steps
        if created
        and not step.after
        and step.wait_signal is None
        and not step.delay_ms
        and step.job.due_at <= step.job.created_at
    }
    if due:

        def committed() -> None:
            store._announce_committed(due)
            if on_commit is not None:
                on_commit(due)

        on_commit_hook(caller.committing, committed)


_IDENTITY = "caravel.database_identity"


def _remembered(caller: CallerConnection) -> str | None:
    """The database the connection was found on before (a pooled connection stays on one)."""
    return None if caller.info is None else caller.info.get(_IDENTITY)


def _remember(caller: CallerConnection, identity: str) -> str:
    if caller.info is not None:
        caller.info[_IDENTITY] = identity
    return identity


def _is_async(target: object) -> bool:
    if isinstance(target, AsyncSession | AsyncConnection):
        return True
    return inspect.iscoroutinefunction(getattr(target, "commit", None))


_OTHER_DATABASE = (
    "is not on the queue's database; pass a session of the queue's own database, or stage the "
    "job in an outbox (caravel.add_outbox) when the databases differ"
)


def _same_kind(store: SqlStore[Any], caller: CallerConnection) -> None:
    """Refuse a connection to another kind of database (PostgreSQL for a SQLite queue, or the
    reverse) before anything is sent on it: the identity query is the queue dialect's SQL,
    which would fail there, and a failed statement aborts the caller's PostgreSQL
    transaction."""
    if caller.dialect != store.db_system:
        raise ValidationError("session", _OTHER_DATABASE)


def _same_database(seen: str, ours: str) -> None:
    if seen != ours:
        raise ValidationError("session", _OTHER_DATABASE)


def _inserted(
    store: SqlStore[Any],
    caller: CallerConnection,
    new_jobs: Sequence[NewJob],
    outcomes: list[InsertOutcome],
    on_commit: Committed,
) -> InsertResult:
    """The insert's result, with the wake-ups for its jobs due now attached to the commit of
    the caller's session (a bare connection has no commit to attach to: workers in other
    processes then find the jobs by polling, except on PostgreSQL, whose NOTIFY is part of
    the transaction)."""
    due = {
        job.queue
        for job, outcome in zip(new_jobs, outcomes, strict=True)
        if outcome.inserted and job.due_at <= job.created_at
    }
    if due:

        def committed() -> None:
            store._announce_committed(due)
            if on_commit is not None:
                on_commit(due)

        on_commit_hook(caller.committing, committed)
    return InsertResult(list(new_jobs), outcomes)


# ----- DB-API connections ----------------------------------------------------------------------


def _dbapi(target: object, *, asynchronous: bool) -> CallerConnection | None:
    """A psycopg, PyMySQL or sqlite3 connection, recognised by its class's module (no driver
    is imported to ask)."""
    module = type(target).__module__
    if module.startswith("psycopg"):
        from sqlalchemy.dialects.postgresql import psycopg

        dialect: Dialect = psycopg.dialect()  # type: ignore[no-untyped-call]
    elif module == "sqlite3" and not asynchronous:
        from sqlalchemy.dialects.sqlite import pysqlite

        dialect = pysqlite.dialect()
    elif module.startswith("pymysql") and not asynchronous:
        from sqlalchemy.dialects.mysql.mariadb import loader

        dialect = loader("pymysql")()
    else:
        return None
    cursor = getattr(target, "cursor", None)
    if cursor is None:
        return None
    is_async = inspect.iscoroutinefunction(getattr(target, "commit", None))
    if is_async != asynchronous:
        return None
    if asynchronous:

        async def execute_async(statement: Any, parameters: Any) -> _Rows:
            compiled = _compile(statement, dialect, parameters)
            rows: list[Any] = []
            async with target.cursor() as cur:  # type: ignore[attr-defined]
                for sql, values in _each(compiled, parameters):
                    await cur.execute(sql, values)
                    if cur.description is not None:
                        rows.extend(await cur.fetchall())
            return _Rows(compiled, rows)

        return CallerConnection(execute_async, dialect.name)

    def execute(statement: Any, parameters: Any) -> _Rows:
        compiled = _compile(statement, dialect, parameters)
        rows: list[Any] = []
        cur = cursor()
        try:
            for sql, values in _each(compiled, parameters):
                cur.execute(sql, values)
                if cur.description is not None:
                    rows.extend(cur.fetchall())
        finally:
            cur.close()
        return _Rows(compiled, rows)

    return CallerConnection(execute, dialect.name)


class _Compiled(NamedTuple):
    compiled: Any  # SQLAlchemy's compiled statement, expanded for each execution
    binds: dict[str, Callable[[Any], Any]]
    columns: tuple[str, ...]
    results: tuple[Callable[[Any], Any] | None, ...]


def _compile(statement: Any, dialect: Dialect, parameters: Any) -> _Compiled:
    # An INSERT names the columns its parameters bring, as SQLAlchemy's execute does.
    first = parameters[0] if isinstance(parameters, list) and parameters else parameters
    keys = list(first) if getattr(statement, "is_insert", False) and first else None
    exported = getattr(statement, "exported_columns", None)
    columns = tuple(exported.keys()) if exported is not None else ()
    results = tuple(
        column.type.dialect_impl(dialect).result_processor(dialect, None)
        for column in (exported or ())
    )
    compiled = statement.compile(dialect=dialect, column_keys=keys)
    binds = {}
    for name, bind in compiled.binds.items():
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            binds[name] = process
    return _Compiled(compiled, binds, columns, results)


def _each(compiled: _Compiled, parameters: Any) -> list[tuple[str, Any]]:
    """The SQL and the driver's parameters for each execution of ``compiled`` (lists such as
    ``IN (...)`` expanded, values processed as SQLAlchemy would)."""
    sets = parameters if isinstance(parameters, list) else [parameters]
    out: list[tuple[str, Any]] = []
    for given in sets:
        state = compiled.compiled.construct_expanded_state(given or None)
        values = dict(state.parameters)
        for name, process in {**compiled.binds, **state.processors}.items():
            if name in values:
                values[name] = process(values[name])
        order = state.positiontup
        out.append((state.statement, values if order is None else tuple(values[n] for n in order)))
    return out


@cache
def _row_type(columns: tuple[str, ...]) -> Any:
    return namedtuple("Row", columns)


class _Rows:
    """A DB-API statement's rows as a plan reads them: named, with SQLAlchemy's result
    processing applied (SQLite's UUID text becomes a UUID)."""

    def __init__(self, compiled: _Compiled, raw: Sequence[Any]) -> None:
        self.returns_rows = bool(compiled.columns)
        self._compiled = compiled
        self._raw = raw

    def all(self) -> list[Any]:
        if not self.returns_rows:
            return list(self._raw)
        make = _row_type(self._compiled.columns)
        processors = self._compiled.results
        return [
            make(*(v if p is None else p(v) for v, p in zip(row, processors, strict=True)))
            for row in self._raw
        ]
