"""Acknowledgement durability reaches the database: each acknowledgement transaction commits with
the durability the caller asked for, and nothing else changes (how it is observed:
``tests/support/sync_settings.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from caravel.store import open_store
from caravel.store.protocol import FailedAttempt, Store
from tests.store.conformance.builders import T0, claim_one, insert, new_job
from tests.support.sync_settings import SETTINGS, seen, watched_url

__all__ = ["watched_url"]  # the fixture


async def _claimed(store: Store, n: int) -> Any:
    await insert(store, [new_job(n)])
    return (await claim_one(store, T0 + 1)).lease


@pytest.mark.parametrize("durable", [False, True])
async def test_each_acknowledgement_commits_with_the_durability_asked_for(
    watched_url: tuple[str, str], durable: bool
) -> None:
    backend, url = watched_url
    expected = SETTINGS[backend][durable]
    store = open_store(url)
    try:
        lease = await _claimed(store, 1)
        seen(url)  # the claim's own update: always durable, checked below
        assert await store.job_complete_many([lease], T0 + 2, durable=durable) == {lease.job_id}
        assert seen(url) == [expected]

        retried = await _claimed(store, 2)
        seen(url)
        failure = FailedAttempt(retried, "HandlerFailed", retry_at=T0 + 10)
        assert await store.job_fail_many([failure], T0 + 3, durable=durable) == {retried.job_id}
        assert seen(url) == [expected]

        # Claims stay durable, and so does the next write on the connection an asynchronous
        # acknowledgement used (the store sets it back).
        await claim_one(store, T0 + 20)
        assert seen(url) == [SETTINGS[backend][True]]
    finally:
        await store.close()
