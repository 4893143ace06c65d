"""``WorkerOptions(durable_acks=...)`` reaches the worker's acknowledgements (how it is observed:
``tests/support/sync_settings.py``)."""

from __future__ import annotations

import pytest

from caravel import DatabaseQueue, QueueWorker, WorkerOptions
from tests.support import Add, dispatch, make_registry
from tests.support.sync_settings import SETTINGS, seen, watched_url

__all__ = ["watched_url"]  # the fixture


@pytest.mark.parametrize("durable", [False, True])
async def test_the_worker_option_reaches_the_acknowledgement(
    watched_url: tuple[str, str], durable: bool
) -> None:
    backend, url = watched_url
    queue = DatabaseQueue(url, make_registry())
    try:
        await queue.enqueue(Add(1), dispatch())
        async with QueueWorker(queue, options=WorkerOptions(durable_acks=durable)) as worker:
            seen(url)
            assert await worker.run_once("default")
        # The claim (always durable), then the acknowledgement as the worker was told.
        assert seen(url) == [SETTINGS[backend][True], SETTINGS[backend][durable]]
    finally:
        await queue.close()
