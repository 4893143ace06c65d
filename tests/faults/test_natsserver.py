"""The NATS test infrastructure against real servers: the throwaway server of
:mod:`tests.faults.natsserver` keeps its streams, their messages and their duplicate windows
through a SIGKILL and a restart on the same port; the shared server's helpers of
:mod:`tests.support.jetstream` make and remove streams of their own."""

from __future__ import annotations

import asyncio
import signal

import pytest

from tests.faults.natsserver import PrivateNats
from tests.support.jetstream import delete_stream, require_nats, scratch_names

pytestmark = [pytest.mark.slow, pytest.mark.serial]


async def _publish(url: str, subject: str, message_id: str) -> tuple[int, bool]:
    import nats

    connection = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    try:
        ack = await connection.jetstream().publish(
            subject, b"{}", headers={"Nats-Msg-Id": message_id}, timeout=5
        )
    finally:
        await connection.close()
    return ack.seq, bool(ack.duplicate)


async def _declare(url: str, stream: str, subject: str) -> None:
    import nats
    from nats.js.api import StreamConfig

    connection = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    try:
        config = StreamConfig(name=stream, subjects=[subject], duplicate_window=600)
        await connection.jetstream().add_stream(config)
    finally:
        await connection.close()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_restart_keeps_the_stream_and_its_duplicate_window(
    private_nats: PrivateNats, sig: signal.Signals
) -> None:
    names = scratch_names("restart")
    subject = names.subject("orders")
    asyncio.run(_declare(private_nats.url, names.stream, subject))
    first = asyncio.run(_publish(private_nats.url, subject, "m-1"))
    private_nats.restart(sig)
    assert private_nats.answers()
    # The same id again after the restart: dropped by the duplicate window, same sequence.
    assert asyncio.run(_publish(private_nats.url, subject, "m-1")) == (first[0], True)
    assert asyncio.run(_publish(private_nats.url, subject, "m-2")) == (first[0] + 1, False)


def test_the_shared_server_gets_streams_of_its_own() -> None:
    url = require_nats()
    names = scratch_names("shared")
    asyncio.run(_declare(url, names.stream, names.subject("x")))
    try:
        assert asyncio.run(_publish(url, names.subject("x"), "a")) == (1, False)
    finally:
        delete_stream(url, names.stream)
    assert scratch_names("shared") != names
