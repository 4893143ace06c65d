"""The awaitable forms of the migration functions, from async code, on both databases: the same
results and errors as the plain functions, without holding up the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import pytest

from caravel import (
    DatabaseNotFoundError,
    DatabaseQueue,
    SchemaNotReadyError,
    ValidationError,
    migrate,
)
from tests.support import make_registry

T = TypeVar("T")


async def _while_counting(work: Awaitable[T]) -> tuple[T, int]:
    """``work``'s result, and how many times another task ran on the loop meanwhile: a
    migration run on the loop's own thread leaves no room for any."""
    ticks = 0
    stop = asyncio.Event()

    async def tick() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)  # one turn of the loop: what the ticker counts

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)  # the ticker starts before the work does
    started = ticks
    try:
        result = await work
    finally:
        stop.set()
        await ticker
    return result, ticks - started


async def test_upgrade_current_check_and_downgrade_can_be_awaited(empty_url: str) -> None:
    assert await migrate.current_async(empty_url) is None
    with pytest.raises(SchemaNotReadyError):
        await migrate.check_async(empty_url)

    _, ticks = await _while_counting(migrate.upgrade_async(empty_url))
    assert ticks > 0  # the loop kept running while the migrations were applied
    assert await migrate.current_async(empty_url) == migrate.head()
    report, ticks = await _while_counting(migrate.check_async(empty_url))
    assert ticks > 0
    assert report == migrate.check(empty_url)
    assert report.current == migrate.head()
    async with DatabaseQueue(empty_url, make_registry()) as queue:
        await queue.check_schema()

    await migrate.downgrade_async(empty_url, "0001")
    assert await migrate.current_async(empty_url) == "0001"
    await migrate.downgrade_async(empty_url, "base")
    assert await migrate.current_async(empty_url) is None


async def test_two_upgrades_gathered_both_finish_at_head(empty_url: str) -> None:
    await asyncio.gather(migrate.upgrade_async(empty_url), migrate.upgrade_async(empty_url))
    assert await migrate.current_async(empty_url) == migrate.head()


async def test_the_awaitable_forms_raise_what_the_plain_functions_raise(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as caught:
        await migrate.upgrade_async("sqlite:///:memory:")
    assert caught.value.field == "url"
    db = f"sqlite:///{tmp_path / 'queue.db'}"
    with pytest.raises(ValidationError) as caught:
        await migrate.upgrade_async(db, "9999")
    assert caught.value.field == "revision"
    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    with pytest.raises(DatabaseNotFoundError):
        await migrate.current_async(missing)
    with pytest.raises(DatabaseNotFoundError):
        await migrate.check_async(missing)
    assert not (tmp_path / "missing.db").exists()
