"""The application's tables and its database engines.

The tables here are the one schema source for the backend's own data; its Alembic history
(``migrations/``) creates exactly this and a test compares the two. The queue's tables belong to
Caravel and its own migrations. Times are whole milliseconds since the Unix epoch (UTC), as in
the queue, so comparisons are exact and identical on SQLite, PostgreSQL and MariaDB.

Nothing here creates a database or a table: the SQLite file is opened with ``mode=rw`` (a
missing file fails instead of appearing empty), and the schema comes only from ``migrate``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from caravel_samples.backend.settings import Settings
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

metadata = sa.MetaData()

#: On MariaDB every table stores utf8mb4 text under a binary collation, so text compares as on
#: the other databases (case, accents and trailing spaces matter), whatever the server's default.
#: The migrations create the tables with the same options.
MARIADB_TABLE = {"mariadb_charset": "utf8mb4", "mariadb_collate": "utf8mb4_nopad_bin"}

users = sa.Table(
    "users",
    metadata,
    sa.Column("id", sa.Uuid(), nullable=False),
    sa.Column("email", sa.String(254), nullable=False),
    sa.Column("password_hash", sa.String(255), nullable=False),
    sa.Column("is_operator", sa.Boolean(), nullable=False),
    sa.Column("created_at", sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint("id", name="pk_users"),
    sa.UniqueConstraint("email", name="uq_users_email"),
    **MARIADB_TABLE,
)

sessions = sa.Table(
    "sessions",
    metadata,
    # The SHA-256 of the cookie's token: a copy of the table does not hand out sessions.
    sa.Column("id", sa.String(64), nullable=False),
    sa.Column("user_id", sa.Uuid(), nullable=False),
    sa.Column("created_at", sa.BigInteger(), nullable=False),
    sa.Column("expires_at", sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint("id", name="pk_sessions"),
    sa.ForeignKeyConstraint(
        ["user_id"], ["users.id"], name="fk_sessions_user_id", ondelete="CASCADE"
    ),
    sa.Index("ix_sessions_user_id", "user_id"),
    **MARIADB_TABLE,
)

notes = sa.Table(
    "notes",
    metadata,
    sa.Column("id", sa.Uuid(), nullable=False),
    sa.Column("owner_id", sa.Uuid(), nullable=False),
    sa.Column("text", sa.String(2000), nullable=False),
    sa.Column("created_at", sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint("id", name="pk_notes"),
    sa.ForeignKeyConstraint(
        ["owner_id"], ["users.id"], name="fk_notes_owner_id", ondelete="CASCADE"
    ),
    sa.Index("ix_notes_owner_id_created_at", "owner_id", "created_at"),
    **MARIADB_TABLE,
)

counter_results = sa.Table(
    "counter_results",
    metadata,
    # The queue job id: the row is both the report's data and the processing receipt.
    sa.Column("job_id", sa.Uuid(), nullable=False),
    sa.Column("owner_id", sa.String(128), nullable=False),
    sa.Column("quantity", sa.Integer(), nullable=False),
    sa.Column("recorded_at", sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint("job_id", name="pk_counter_results"),
    sa.CheckConstraint("quantity >= 1 AND quantity <= 1000", name="ck_counter_results_quantity"),
    sa.Index("ix_counter_results_owner_recorded", "owner_id", "recorded_at", "job_id"),
    **MARIADB_TABLE,
)

BUSY_TIMEOUT_MS = 30_000
_READ_ONLY = "backend_read_only"


def sqlite_path(settings: Settings) -> Path:
    return Path(settings.identity_database.strip()).resolve()


def _sqlite_url(path: Path, *, mode: str) -> sa.URL:
    return sa.URL.create(
        "sqlite+aiosqlite",
        database=f"file:{quote(str(path))}",
        query={"mode": mode, "uri": "true"},
    )


def _postgres_url(settings: Settings) -> sa.URL:
    return sa.make_url(settings.database_url).set(drivername="postgresql+psycopg")


def _mariadb_url(settings: Settings, *, driver: str = "asyncmy") -> sa.URL:
    # The queue's drivers: asyncmy for the application, PyMySQL for Alembic.
    return sa.make_url(settings.database_url).set(
        drivername=f"mariadb+{driver}", query={"charset": "utf8mb4"}
    )


def sync_url(settings: Settings) -> sa.URL:
    """The URL Alembic uses (synchronous drivers)."""
    if settings.database_provider == "sqlite":
        return sa.URL.create("sqlite+pysqlite", database=str(sqlite_path(settings)))
    if settings.database_provider == "mariadb":
        return _mariadb_url(settings, driver="pymysql")
    return _postgres_url(settings)


#: MariaDB sessions read what committed before each statement, as PostgreSQL's do (InnoDB's
#: default, REPEATABLE READ, reads a snapshot taken at a transaction's first read).
MARIADB_ISOLATION = "READ COMMITTED"


def create_engine(settings: Settings) -> AsyncEngine:
    """The application's pooled engine.

    On SQLite the file runs in WAL mode, competing writers wait up to 30 seconds, and every
    transaction starts with ``BEGIN IMMEDIATE`` so a read never has to upgrade to a write lock
    (reads that say so, through :func:`reading`, start a plain ``BEGIN``).
    """
    if settings.database_provider == "postgres":
        return create_async_engine(
            _postgres_url(settings),
            pool_size=10,
            max_overflow=10,
            connect_args={"application_name": "caravel-backend"},
        )
    if settings.database_provider == "mariadb":
        # The server closes connections idle for its wait_timeout (8 hours by default).
        return create_async_engine(
            _mariadb_url(settings),
            pool_size=10,
            max_overflow=10,
            pool_recycle=3600,
            isolation_level=MARIADB_ISOLATION,
        )
    engine = create_async_engine(
        _sqlite_url(sqlite_path(settings), mode="rw"), pool_size=5, max_overflow=10
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the "begin" listener issues BEGIN itself
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        if conn.get_execution_options().get(_READ_ONLY):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def create_read_only_engine(settings: Settings, *, timeout_seconds: float) -> AsyncEngine:
    """An engine whose every connection is new and read-only: SQLite opened with ``mode=ro``
    (a missing file is an error, never created), PostgreSQL and MariaDB sessions that refuse
    writes."""
    if settings.database_provider == "mariadb":
        return create_async_engine(
            _mariadb_url(settings),
            poolclass=sa.pool.NullPool,
            isolation_level=MARIADB_ISOLATION,
            connect_args={
                "connect_timeout": max(1, round(timeout_seconds)),
                "init_command": "SET SESSION TRANSACTION READ ONLY",
            },
        )
    if settings.database_provider == "postgres":
        return create_async_engine(
            _postgres_url(settings),
            poolclass=sa.pool.NullPool,
            connect_args={
                "application_name": "caravel-backend-ready",
                "connect_timeout": max(1, round(timeout_seconds)),
                "options": "-c default_transaction_read_only=on",
            },
        )
    return create_async_engine(
        _sqlite_url(sqlite_path(settings), mode="ro"),
        poolclass=sa.pool.NullPool,
        connect_args={"timeout": timeout_seconds},
    )


@asynccontextmanager
async def reading(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A transaction that only reads (a plain ``BEGIN`` on SQLite, so it never waits for the
    write lock)."""
    async with engine.connect() as conn:
        await conn.execution_options(**{_READ_ONLY: True})
        async with conn.begin():
            yield conn


@asynccontextmanager
async def writing(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A transaction that writes; committed when the block ends without an error."""
    async with engine.begin() as conn:
        yield conn
