"""The SQLite wake-up channel on its own: the folder of sockets beside the database file, the
announcer that sends queue names to them and the listeners that receive them."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from caravel.store.sqlite import notifications
from caravel.store.sqlite.notifications import Announcer, folder_for, listen
from tests.support import until

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no Unix sockets")

#: Generous for a local datagram, which arrives in well under a millisecond.
ARRIVAL = 5.0


@pytest.fixture
def folder(tmp_path: Path) -> str:
    found = folder_for(str(tmp_path / "queue.db"))
    assert found is not None
    return found


def sockets(folder: str) -> set[str]:
    """The names in the wake-up folder (none when it is missing)."""
    try:
        return set(os.listdir(folder))
    except FileNotFoundError:
        return set()


async def started(
    folder: str, queues: frozenset[str], check_every: float = 5.0
) -> tuple[AsyncIterator[str], asyncio.Future[str]]:
    """A listener whose socket is bound, with its first read pending."""
    before = sockets(folder)
    feed = listen(folder, queues, check_every=check_every, retry_after=0.01)
    first = asyncio.ensure_future(anext(feed))
    await until(lambda: bool(sockets(folder) - before), what="the listener to bind its socket")
    return feed, first


async def stop(feed: AsyncIterator[str], pending: asyncio.Future[str]) -> None:
    pending.cancel()
    await asyncio.gather(pending, return_exceptions=True)
    await feed.aclose()  # type: ignore[attr-defined]


def test_the_folder_sits_beside_the_file(tmp_path: Path) -> None:
    assert folder_for(str(tmp_path / "queue.db")) == str(tmp_path / "queue.db") + "-wakeups"


def test_a_path_too_long_for_an_address_has_none_without_descriptor_paths(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(notifications, "PROC_FD", str(tmp_path / "no-such-folder"))
    assert folder_for("/" + "d" * 120 + "/queue.db") is None
    assert folder_for("/tmp/queue.db") is not None  # short enough: still there


@pytest.mark.skipif(not os.path.isdir(notifications.PROC_FD), reason="no /proc/self/fd")
async def test_a_folder_deeper_than_a_socket_address_still_wakes_its_listeners(
    tmp_path: Path,
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    folder = folder_for(str(deep / "queue.db"))
    assert folder is not None
    assert len(folder) > 110
    feed, first = await started(folder, frozenset({"jobs"}))
    announcer = Announcer(folder)
    try:
        announcer.announce(["jobs"])
        assert await asyncio.wait_for(first, ARRIVAL) == "jobs"
        assert len(sockets(folder)) == 1
    finally:
        announcer.close()
        await stop(feed, first)


def test_announcing_without_a_folder_does_nothing(folder: str) -> None:
    announcer = Announcer(folder)
    announcer.announce(["jobs"])  # no folder yet: no listeners, no error
    assert not os.path.exists(folder)
    announcer.close()


async def test_a_listener_hears_its_queues_only(folder: str) -> None:
    feed, first = await started(folder, frozenset({"jobs"}))
    announcer = Announcer(folder)
    try:
        announcer.announce(["elsewhere", "jobs"])
        assert await asyncio.wait_for(first, ARRIVAL) == "jobs"
    finally:
        announcer.close()
        await stop(feed, first)
    assert os.listdir(folder) == []  # the listener removed its socket


async def test_every_listener_hears_each_announcement(folder: str) -> None:
    listeners = [await started(folder, frozenset({"jobs"})) for _ in range(20)]
    announcer = Announcer(folder)
    try:
        announcer.announce(["jobs"])
        heard = await asyncio.wait_for(asyncio.gather(*(f for _, f in listeners)), ARRIVAL)
        assert heard == ["jobs"] * 20
    finally:
        announcer.close()
        for feed, first in listeners:
            await stop(feed, first)


async def test_a_stale_socket_is_removed_and_the_live_ones_still_hear(folder: str) -> None:
    feed, first = await started(folder, frozenset({"jobs"}))
    # A worker that died: its socket file is still there, nobody receives on it.
    stale = os.path.join(folder, "0123456789ab.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(stale)
    dead.close()
    announcer = Announcer(folder)
    try:
        announcer.announce(["jobs"])
        assert await asyncio.wait_for(first, ARRIVAL) == "jobs"
        assert len(sockets(folder)) == 1  # the live listener's; the stale one is gone
    finally:
        announcer.close()
        await stop(feed, first)


async def test_a_listener_that_joins_later_is_found(folder: str) -> None:
    # The announcer caches its scan of the folder; a socket bound after it must still be seen.
    early, early_first = await started(folder, frozenset({"jobs"}))
    announcer = Announcer(folder)
    try:
        announcer.announce(["jobs"])
        assert await asyncio.wait_for(early_first, ARRIVAL) == "jobs"
        late, late_first = await started(folder, frozenset({"jobs"}))
        announcer.announce(["jobs"])
        assert await asyncio.wait_for(late_first, ARRIVAL) == "jobs"
        await stop(late, late_first)
    finally:
        announcer.close()
        await early.aclose()  # type: ignore[attr-defined]


async def test_a_full_buffer_never_blocks_the_announcer(folder: str) -> None:
    feed, first = await started(folder, frozenset({"jobs"}))
    announcer = Announcer(folder)
    try:
        # The listener's event loop never runs meanwhile, so its buffer fills up.
        for _ in range(5_000):
            announcer.announce(["jobs"])
        assert await asyncio.wait_for(first, ARRIVAL) == "jobs"
        assert len(os.listdir(folder)) == 1  # a full buffer is not a dead listener
    finally:
        announcer.close()
        await stop(feed, first)


async def test_a_listener_binds_again_when_its_folder_is_deleted(folder: str) -> None:
    feed, first = await started(folder, frozenset({"jobs"}), check_every=0.05)
    announcer = Announcer(folder)
    try:
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)
        await until(lambda: bool(sockets(folder)), what="the listener to bind again")
        announcer.announce(["jobs"])
        assert await asyncio.wait_for(first, ARRIVAL) == "jobs"
    finally:
        announcer.close()
        await stop(feed, first)
