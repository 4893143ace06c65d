"""Leaving the tenant out, on every database: a job enqueued without one has the documented
default tenant, is found by every lookup without one, and is matched exactly like any other
tenant (so another tenant never sees it). A tenant that is given is checked as before."""

from __future__ import annotations

from typing import Any

import pytest

from caravel import (
    DEFAULT_TENANT,
    DispatchOptions,
    JobContext,
    JobState,
    Leases,
    QueueWorker,
    ValidationError,
)
from caravel.testing import ManualClock
from tests.support import Add, inspector_of, open_queue, registry_for

QUEUE = "single"


def test_the_default_tenant_is_documented_and_passes_the_tenant_rule() -> None:
    assert DEFAULT_TENANT == "default"
    assert DispatchOptions(queue=QUEUE).tenant_id == DEFAULT_TENANT


@pytest.mark.parametrize("tenant", ["", "   ", None, "a\x00b", "x" * 129])
def test_a_given_tenant_is_checked_as_before(tenant: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        DispatchOptions(queue=QUEUE, tenant_id=tenant)
    assert caught.value.field == "tenant_id"


async def test_a_job_without_tenant_is_found_without_tenant_and_only_so(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        result = await queue.enqueue(Add(1), DispatchOptions(queue=QUEUE))
        status = await queue.get_status(result.job_id, QUEUE)
        assert status is not None
        assert status.tenant_id == DEFAULT_TENANT
        assert status.state is JobState.READY
        assert await queue.get_status(result.job_id, QUEUE, tenant_id=DEFAULT_TENANT) == status
        assert await queue.get_payload(result.job_id, QUEUE) == '{"amount":1,"note":""}'
        for other in ("other", "Default", "DEFAULT", "default "):
            assert await queue.get_status(result.job_id, QUEUE, other) is None
            assert await queue.get_payload(result.job_id, QUEUE, other) is None

        reader = inspector_of(queue)
        assert await reader.get_status(result.job_id, QUEUE) == status
        assert await reader.get_payload(result.job_id, QUEUE) == '{"amount":1,"note":""}'
        assert await reader.get_status(result.job_id, QUEUE, "other") is None
        listed = await reader.list_jobs(tenant_id=DEFAULT_TENANT)
        assert [s.job_id for s in listed] == [result.job_id]


async def test_a_job_with_a_tenant_is_not_found_without_one(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        result = await queue.enqueue(Add(1), DispatchOptions(queue=QUEUE, tenant_id="tenant-a"))
        assert await queue.get_status(result.job_id, QUEUE) is None
        assert await queue.get_payload(result.job_id, QUEUE) is None
        assert await queue.get_status(result.job_id, QUEUE, "tenant-a") is not None


@pytest.mark.parametrize("tenant", ["", " ", None])
async def test_lookups_refuse_an_explicit_blank_or_missing_tenant(db_url: str, tenant: Any) -> None:
    async with open_queue(db_url) as queue:
        result = await queue.enqueue(Add(1), DispatchOptions(queue=QUEUE))
        reader = inspector_of(queue)
        for lookup in (
            queue.get_status,
            queue.get_payload,
            queue.replay,
            reader.get_status,
            reader.get_payload,
        ):
            with pytest.raises(ValidationError) as caught:
                await lookup(result.job_id, QUEUE, tenant)
            assert caught.value.field == "tenant_id"


async def test_idempotency_keys_of_the_default_tenant_are_its_own(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        first = await queue.enqueue(Add(1), DispatchOptions(queue=QUEUE, idempotency_key="k"))
        again, other = await queue.enqueue_many(
            [
                (Add(1), DispatchOptions(queue=QUEUE, idempotency_key="k")),
                (Add(1), DispatchOptions(queue=QUEUE, tenant_id="other", idempotency_key="k")),
            ]
        )
        assert again.job_id == first.job_id
        assert again.already_enqueued is True
        assert other.job_id != first.job_id
        assert other.already_enqueued is False


async def test_replay_without_tenant_matches_exactly(db_url: str) -> None:
    async with open_queue(db_url, max_attempts=1) as queue:
        result = await queue.enqueue(Add(1), DispatchOptions(queue=QUEUE))
        leases = Leases(queue)
        claimed = await leases.claim(QUEUE)
        assert claimed is not None
        await leases.fail(claimed.lease, "HandlerFailed")
        assert await queue.replay(result.job_id, QUEUE, "other") is False
        assert await queue.replay(result.job_id, QUEUE) is True
        status = await queue.get_status(result.job_id, QUEUE)
        assert status is not None
        assert status.state is JobState.READY
        assert status.attempt == 0


async def test_the_handler_sees_the_default_tenant(db_url: str) -> None:
    seen: list[str] = []

    async def handler(job: Add, ctx: JobContext[Any]) -> None:
        seen.append(ctx.tenant_id)

    clock = ManualClock()
    async with open_queue(db_url, registry_for(handler), clock=clock) as queue:
        await queue.enqueue(Add(1), DispatchOptions(queue=QUEUE))
        async with QueueWorker(queue) as worker:
            assert await worker.run_once(QUEUE) is True
    assert seen == [DEFAULT_TENANT]
