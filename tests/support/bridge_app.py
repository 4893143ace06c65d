"""An application database with an outbox table of its own, for the bridge's egress tests.

The table lives beside the queue's tables in the test's database (a SQLite file, or the
session's PostgreSQL or MariaDB database) under a name no other test uses, and is dropped
afterwards. :meth:`OutboxApp.stage` commits intents through :class:`~caravel.outbox.Outbox` in
the application's own session, as an application would."""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.orm import Session

from caravel import DispatchOptions
from caravel.outbox import Outbox, OutboxEnvelope, add_outbox
from tests.support import make_registry

__all__ = ["OutboxApp", "outbox_app", "sync_url_of"]

#: The SQLAlchemy drivers of each backend: (sync, async).
DRIVERS = {
    "sqlite": ("sqlite+pysqlite", "sqlite+aiosqlite"),
    "postgresql": ("postgresql+psycopg", "postgresql+psycopg"),
    "mariadb": ("mariadb+pymysql", "mariadb+asyncmy"),
}


def _with_driver(url: str, which: int) -> str:
    parsed = sa.make_url(url)
    driver = DRIVERS[parsed.get_backend_name()][which]
    return parsed.set(drivername=driver).render_as_string(hide_password=False)


def sync_url_of(url: str) -> str:
    """``url`` with the backend's synchronous driver."""
    return _with_driver(url, 0)


@dataclass
class OutboxApp:
    """The outbox table ``table`` in the database at ``url``."""

    url: str
    table: str
    engine: sa.Engine
    envelope: type[OutboxEnvelope]

    @property
    def async_url(self) -> str:
        return _with_driver(self.url, 1)

    def stage(self, items: Sequence[object], dispatch: DispatchOptions) -> list[UUID]:
        """Stage ``items`` in one committed transaction; their outbox ids, in order."""
        outbox = Outbox(make_registry(), self.envelope)
        with Session(self.engine) as session, session.begin():
            return [outbox.stage(session, item, dispatch).outbox_id for item in items]

    def pending(self) -> list[Any]:
        """The intents not recorded as dispatched, oldest first."""
        table = sa.Table(self.table, sa.MetaData(), autoload_with=self.engine)
        with self.engine.connect() as conn:
            query = sa.select(table).where(table.c.dispatched_at.is_(None))
            return list(conn.execute(query.order_by(table.c.staged_at, table.c.id)))


@contextmanager
def outbox_app(url: str) -> Iterator[OutboxApp]:
    """An outbox table of its own in ``url``'s database, dropped afterwards."""
    metadata = sa.MetaData()
    name = f"bridge_outbox_{secrets.token_hex(4)}"
    envelope = add_outbox(metadata, name=name)
    engine = sa.create_engine(sync_url_of(url))
    try:
        metadata.create_all(engine)
        yield OutboxApp(url, name, engine, envelope)
    finally:
        metadata.drop_all(engine)
        engine.dispose()
