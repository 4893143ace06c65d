"""PostgreSQL sessions of a read-only store refuse writes even when the startup option that
asks for it is lost on the way (a connection pooler may drop startup parameters): the session
is made read-only again by a statement when it opens."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import create_async_engine

from caravel.store.postgresql import connections
from caravel.store.urls import async_url

pytestmark = pytest.mark.postgres


async def test_a_session_opened_without_the_startup_option_is_still_read_only(
    pg_url: str,
) -> None:
    engine = create_async_engine(async_url(pg_url))  # no startup options at all
    event.listen(engine.sync_engine, "connect", connections._read_only_session)
    try:
        async with engine.connect() as conn:
            shown = await conn.exec_driver_sql("SHOW default_transaction_read_only")
            assert shown.scalar() == "on"
            with pytest.raises(sa.exc.DBAPIError, match="read-only transaction"):
                await conn.exec_driver_sql("CREATE TABLE refused (id integer)")
    finally:
        await engine.dispose()


async def test_the_read_only_engine_refuses_writes(pg_url: str) -> None:
    engine = connections.create_engine(pg_url, read_only=True)
    try:
        async with engine.connect() as conn:
            with pytest.raises(sa.exc.DBAPIError, match="read-only transaction"):
                await conn.exec_driver_sql("DELETE FROM caravel_jobs")
    finally:
        await engine.dispose()
