"""The application's own table, ``signups``, and the blocking engine it is reached through.

Times are integer milliseconds from the application's clock, as in the queue, so tests move
them with a :class:`~caravel.testing.ManualClock`.
"""

from __future__ import annotations

from typing import Any, ClassVar
from uuid import UUID

import sqlalchemy as sa
from caravel_samples.flask.settings import Settings
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker


class Base(DeclarativeBase):
    pass


metadata = Base.metadata


class Signup(Base):
    """One person who signed up. ``welcome_job_id`` is the queue job that welcomes them,
    committed in the same transaction as this row; ``welcomed_at_ms`` is set by that job."""

    __tablename__ = "signups"
    # On MariaDB: utf8mb4 text under a binary collation, as the queue's tables (the migration
    # creates it so).
    __table_args__: ClassVar[dict[str, str]] = {
        "mariadb_charset": "utf8mb4",
        "mariadb_collate": "utf8mb4_nopad_bin",
    }

    id: Mapped[UUID] = mapped_column(sa.Uuid(), primary_key=True)
    email: Mapped[str] = mapped_column(sa.String(254), unique=True)
    welcome_job_id: Mapped[UUID] = mapped_column(sa.Uuid())
    created_at_ms: Mapped[int] = mapped_column(sa.BigInteger())
    welcomed_at_ms: Mapped[int | None] = mapped_column(sa.BigInteger(), default=None)


def create_engine(settings: Settings) -> sa.Engine:
    """A blocking engine for request threads and synchronous handlers. A SQLite file is in
    WAL mode once the queue's migrations ran, so readers and the one writer do not block each
    other; each transaction here takes the write lock first, as the queue's own do."""
    if settings.is_mariadb:
        # READ COMMITTED, PostgreSQL's default, so that the sample reads alike on both.
        return sa.create_engine(
            settings.app_url, pool_pre_ping=True, isolation_level="READ COMMITTED"
        )
    if not settings.is_sqlite:
        return sa.create_engine(settings.app_url, pool_pre_ping=True)
    engine = sa.create_engine(settings.app_url, connect_args={"timeout": 30})

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # SQLAlchemy's "begin" event below issues BEGIN, not the driver.
        dbapi_connection.isolation_level = None

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        # Take the write lock up front: a transaction that reads, then writes, would otherwise
        # fail at once (without the busy wait) when another thread wrote in between.
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def session_factory(engine: sa.Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
