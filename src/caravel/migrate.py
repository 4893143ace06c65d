"""Apply and inspect the queue's migrations: plain functions, with a thin command line over them
(``caravel db ...``).

The library never creates or alters tables while it runs; these functions are the deliberate
step an operator or a deployment takes. Caravel keeps its history in its own version table,
``caravel_alembic_version``, so an application's Alembic history can live in the same database.

Each function has an awaitable form for async applications (``await upgrade_async(url)``): the
same function, run in a worker thread so the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import sqlalchemy as sa

from caravel.errors import (
    DatabaseNotFoundError,
    DowngradeRefusedError,
    SchemaNotReadyError,
    StoreError,
    ValidationError,
)
from caravel.migrations import HEAD
from caravel.migrations.losses import Loss
from caravel.store.errors import driver_reason
from caravel.store.schema import (
    FINISHED_COUNTS_TABLE,
    RELEASES_TABLE,
    TABLE_NAMES,
    VERSION_TABLE,
    include_object,
)
from caravel.store.urls import sync_url

if TYPE_CHECKING:
    from alembic.config import Config

    from caravel.store.protocol import ReadStore

# Alembic (and Mako, which it brings) is imported by the functions that need it, so importing
# this module, as the queue does for ``require_current_schema``, stays cheap.

__all__ = [
    "DowngradeReport",
    "Loss",
    "SchemaReport",
    "check",
    "check_async",
    "current",
    "current_async",
    "downgrade",
    "downgrade_async",
    "exclude_caravel_names",
    "exclude_caravel_tables",
    "head",
    "require_current_schema",
    "upgrade",
    "upgrade_async",
]


#: Every table Caravel's own history creates and changes.
_OURS = frozenset({*TABLE_NAMES, VERSION_TABLE, FINISHED_COUNTS_TABLE, RELEASES_TABLE})


def exclude_caravel_tables(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    """An ``include_object`` filter for *your application's* Alembic ``env.py`` when the queue
    lives in the same database: everything but Caravel's own tables (the jobs and workers tables,
    their indexes and constraints, and Caravel's version table), which Caravel's history
    creates and changes. Without it, your autogenerate proposes dropping them. The outbox table
    is yours and stays included::

        context.configure(..., include_object=caravel.migrate.exclude_caravel_tables)
    """
    if type_ == "table":
        return name not in _OURS
    table = getattr(obj, "table", None)
    return getattr(table, "name", None) not in _OURS


def exclude_caravel_names(name: str | None, type_: str, parent_names: object) -> bool:
    """The ``include_name`` companion of :func:`exclude_caravel_tables`: it leaves Caravel's
    tables out before Alembic reflects them, so your autogenerate never reads their indexes
    (SQLite's reflection cannot read the claim's expression index and would warn about it)::

        context.configure(
            ...,
            include_name=caravel.migrate.exclude_caravel_names,
            include_object=caravel.migrate.exclude_caravel_tables,
        )
    """
    return type_ != "table" or name not in _OURS


def _config(url: str | sa.URL) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(files("caravel") / "migrations"))
    config.attributes["url"] = sync_url(url)
    return config


def head() -> str:
    """The newest revision shipped with this version of the library."""
    return HEAD


async def require_current_schema(store: ReadStore) -> None:
    """Raise :class:`~caravel.errors.SchemaNotReadyError` unless the store's database is at the
    library's newest migration."""
    found = await store.schema_revision()
    if found is None:
        raise SchemaNotReadyError("no queue migration has been applied")
    if found != HEAD:
        raise SchemaNotReadyError(f"at revision {found}, the newest is {HEAD}")


def upgrade(url: str | sa.URL, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` (default: the newest). An in-memory SQLite URL is
    refused: the database would vanish when the call returns."""
    from alembic import command
    from alembic.util.exc import CommandError

    target = sync_url(url)
    if target.get_backend_name() == "sqlite" and target.database in (None, "", ":memory:"):
        raise ValidationError(
            "url",
            "must name a database file (an in-memory SQLite database vanishes when the command "
            "ends), such as sqlite:///queue.db",
        )
    try:
        command.upgrade(_config(url), revision)
        if target.get_backend_name() == "sqlite":
            _use_wal(target)
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError("upgrade", driver_reason(exc)) from exc
    except CommandError as exc:
        raise _unknown_revision(revision) from exc


def _use_wal(target: sa.URL) -> None:
    """Switch a SQLite queue's file to WAL, as the queue runs it. Switching needs the file to
    itself; done here, the queue's first connection never has to wait for an application that
    shares the file and has a write transaction open (``enqueue(..., session=...)``)."""
    engine = sa.create_engine(target, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode = WAL")
    finally:
        engine.dispose()


@dataclass(frozen=True, slots=True)
class DowngradeReport:
    """What :func:`downgrade` did: the revision it started from and the one it left (``None``
    for none applied), and what its steps took, in the order they ran (empty unless forced:
    an unforced downgrade that would take anything refuses instead)."""

    previous: str | None
    current: str | None
    losses: tuple[Loss, ...]


def downgrade(url: str | sa.URL, revision: str = "-1", *, force: bool = False) -> DowngradeReport:
    """Revert migrations down to ``revision`` (default: one step; ``"base"`` removes all).

    A step that would delete rows or strand jobs (held chain steps, cancelled jobs, key
    tombstones, every job at ``base``: docs/guides/migrations.md lists them per revision) makes
    it raise :class:`~caravel.errors.DowngradeRefusedError`, saying how many of what, and change
    nothing, unless ``force`` is true; then it goes ahead and the report lists what went. The
    count and the downgrade are one transaction (on PostgreSQL with the counted tables locked,
    on SQLite under ``BEGIN IMMEDIATE``), so what was counted is what goes.
    """
    from alembic.runtime.environment import EnvironmentContext
    from alembic.runtime.migration import MigrationContext, RevisionStep
    from alembic.script import ScriptDirectory
    from alembic.util.exc import CommandError

    from caravel.migrations.dialects import runs_on
    from caravel.migrations.losses import count_losses, describe

    config = _config(url)
    script = ScriptDirectory.from_config(config)
    report: list[DowngradeReport] = []

    def plan(heads: tuple[str, ...], context: MigrationContext) -> list[RevisionStep]:
        """The steps to run, once what they would take was counted and allowed."""
        previous = heads[0] if heads else None  # the history is one line: one head at most
        steps = script._downgrade_revs(revision, previous)  # what alembic's own command runs
        assert context.connection is not None
        dialect = context.connection.dialect.name
        losses = count_losses(
            context.connection,
            [
                (s.revision.revision, s.revision.module.LOSSES)
                for s in steps
                if runs_on(s.revision.revision, dialect)
            ],
        )
        after = (steps[-1].to_revisions or (None,))[0] if steps else previous
        if losses and not force:
            counts = {loss.kind: loss.rows for loss in losses}
            raise DowngradeRefusedError(after or "base", counts, describe(losses))
        report.append(DowngradeReport(previous, after, tuple(losses)))
        return steps

    try:
        engine = _migration_engine(url)
    except DatabaseNotFoundError:
        try:  # a typo in the revision is the first thing to fix
            script._downgrade_revs(revision, HEAD)
        except CommandError as exc:
            raise _unknown_revision(revision) from exc
        raise
    try:
        # One transaction around the count and every step: a refusal or a failed step leaves
        # the database as it was.
        with engine.connect() as conn, conn.begin():
            config.attributes["connection"] = conn
            with EnvironmentContext(config, script, fn=plan, destination_rev=revision):
                script.run_env()
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError("downgrade", driver_reason(exc)) from exc
    except CommandError as exc:
        raise _unknown_revision(revision) from exc
    finally:
        engine.dispose()
    return report[0]


def _migration_engine(url: str | sa.URL) -> sa.Engine:
    """An engine whose transactions take DDL with them (SQLite's needs setting up for it); a
    SQLite file is opened, never created."""
    target = sync_url(url)
    if target.get_backend_name() == "sqlite":
        from caravel.store.sqlite.connections import create_migration_engine

        return create_migration_engine(_existing_file(target, "downgrade", "rw"))
    return sa.create_engine(target, poolclass=sa.pool.NullPool)


def _existing_file(target: sa.URL, operation: str, mode: str) -> sa.URL:
    """``target``, a SQLite file's URL, to be opened with ``mode`` (``ro`` or ``rw``, so never
    created); a missing file raises :class:`~caravel.errors.DatabaseNotFoundError`."""
    if target.database in (None, "", ":memory:"):
        return target
    path = Path(target.database or "")
    if not path.exists():
        raise DatabaseNotFoundError(operation, str(path.absolute()))
    return target.set(database=f"file:{path}", query={**target.query, "mode": mode, "uri": "true"})


def _unknown_revision(revision: str) -> ValidationError:
    """What a revision Alembic cannot place (a typo, a revision of a newer release) becomes."""
    from alembic.script import ScriptDirectory

    known = [
        script.revision
        for script in ScriptDirectory.from_config(_config("sqlite://")).walk_revisions()
    ]
    return ValidationError(
        "revision",
        f"{revision!r} is not a queue migration: use head, base, -1, or one of "
        + ", ".join(sorted(known)),
    )


def _inspection_engine(url: str | sa.URL) -> sa.Engine:
    """An engine that looks without creating anything: a SQLite file is opened read-only, and
    a missing file is reported rather than created."""
    target = sync_url(url)
    if target.get_backend_name() == "sqlite":
        target = _existing_file(target, "check", "ro")
    return sa.create_engine(target, poolclass=sa.pool.NullPool)


def current(url: str | sa.URL) -> str | None:
    """The applied revision, or ``None`` when the queue was never migrated. Changes nothing: a
    SQLite file that does not exist raises :class:`~caravel.errors.DatabaseNotFoundError`."""
    from alembic.runtime.migration import MigrationContext

    try:
        engine = _inspection_engine(url)
    except SchemaNotReadyError:
        return None
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return context.get_current_revision()
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError("current", driver_reason(exc)) from exc
    finally:
        engine.dispose()


@dataclass(frozen=True, slots=True)
class SchemaReport:
    """What :func:`check` found."""

    current: str | None
    head: str
    differences: tuple[str, ...]


def _schema_model(dialect: str) -> tuple[sa.MetaData, Callable[..., bool]]:
    """The queue's tables as a database of ``dialect`` (SQLAlchemy's name) holds them once
    migrated, and the ``include_object`` filter that keeps only them: what :func:`check`
    compares the database with."""
    if dialect == "mariadb":  # the same tables in MariaDB's terms
        from caravel.store.mariadb.model import include_in_model, mariadb_model

        return mariadb_model(), include_in_model
    from caravel.store.schema import metadata

    return metadata, include_object


def check(url: str | sa.URL) -> SchemaReport:
    """Confirm the database is at the newest revision and matches the table definitions.

    Raises :class:`~caravel.errors.SchemaNotReadyError` when it is not, naming the revision found
    and the differences; returns the report when everything matches.
    """
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    newest = head()
    engine = _inspection_engine(url)
    try:
        with engine.connect() as conn:
            model, included = _schema_model(conn.dialect.name)
            context = MigrationContext.configure(
                conn,
                opts={
                    "version_table": VERSION_TABLE,
                    "compare_type": True,
                    "include_object": included,
                },
            )
            found = context.get_current_revision()
            with warnings.catch_warnings():
                # SQLite's reflection cannot read the claim's expression index and says so;
                # the migration tests check that index on SQLite instead.
                warnings.filterwarnings(
                    "ignore", "Skipped unsupported reflection", sa.exc.SAWarning
                )
                warnings.filterwarnings("ignore", "autogenerate skipping", UserWarning)
                diffs = (
                    () if found is None else tuple(str(d) for d in compare_metadata(context, model))
                )
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError("check", driver_reason(exc)) from exc
    finally:
        engine.dispose()
    if found is None:
        raise SchemaNotReadyError("no queue migration has been applied")
    if found != newest:
        raise SchemaNotReadyError(f"at revision {found}, the newest is {newest}")
    if diffs:
        raise SchemaNotReadyError(f"the tables differ from the model: {'; '.join(diffs)}")
    return SchemaReport(current=found, head=newest, differences=diffs)


# ----- awaitable forms -----------------------------------------------------------------------

P = ParamSpec("P")
R = TypeVar("R")

#: Alembic keeps the running migration in module-level state, so two migrations at once in one
#: process (say, two ``upgrade_async`` calls gathered) would see each other's; they take turns.
_ONE_AT_A_TIME = threading.Lock()


async def _in_thread(function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``function(*args, **kwargs)`` in a worker thread, one at a time, its errors raised here."""

    def locked() -> R:
        with _ONE_AT_A_TIME:
            return function(*args, **kwargs)

    return await asyncio.to_thread(locked)


async def upgrade_async(url: str | sa.URL, revision: str = "head") -> None:
    """:func:`upgrade`, awaitable: it runs in a worker thread and raises what it raises."""
    await _in_thread(upgrade, url, revision)


async def downgrade_async(
    url: str | sa.URL, revision: str = "-1", *, force: bool = False
) -> DowngradeReport:
    """:func:`downgrade`, awaitable (in a worker thread)."""
    return await _in_thread(downgrade, url, revision, force=force)


async def current_async(url: str | sa.URL) -> str | None:
    """:func:`current`, awaitable (in a worker thread)."""
    return await _in_thread(current, url)


async def check_async(url: str | sa.URL) -> SchemaReport:
    """:func:`check`, awaitable (in a worker thread): the report, or
    :class:`~caravel.errors.SchemaNotReadyError`."""
    return await _in_thread(check, url)
