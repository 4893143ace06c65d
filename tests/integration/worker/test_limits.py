"""Concurrency limits end to end in one process: limits set through the queue and declared on
the registry, partition keys from the tenant, a payload field or the dispatch, limited claims
through the lease protocol, and the continuous worker following a limit and its removal. Time
moves on a manual clock; the worker reads limits again at its poll interval."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from caravel import (
    ConcurrencyLimit,
    DatabaseQueue,
    DispatchOptions,
    JobContext,
    JobRegistry,
    QueueInspector,
    QueueWorker,
    WorkerOptions,
)
from caravel.errors import RegistrationError, ValidationError
from caravel.testing import ManualClock
from tests.support import Add, dispatch, open_queue, registry_for, within

MINUTE = timedelta(seconds=60)
#: Far longer than the minute the clock moves, so a held job's lease never runs out meanwhile.
HOUR = timedelta(hours=1)
QUIET = WorkerOptions(poll_interval=MINUTE, min_poll_interval=MINUTE, concurrency=8)


@dataclasses.dataclass(frozen=True)
class Upload:
    account: str
    size: int = 0


def _uploads(handler: Any = None) -> JobRegistry:
    async def noop(job: Upload, ctx: JobContext[Any]) -> None:
        return None

    registry = registry_for()
    registry.register("tests.upload.v1", Upload, handler or noop, partition_by="account")
    return registry


async def _claimed_keys(queue: DatabaseQueue, worker: QueueWorker) -> Counter[str]:
    claimed = await worker.leases.claim_many("default", 50, limited=True)
    jobs = [await queue.get_status(job.job_id, "default", job.tenant_id) for job in claimed]
    return Counter(job.tenant_id for job in jobs if job is not None)


async def test_per_key_limits_count_tenants_by_default(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        for n in range(6):
            await queue.enqueue(Add(n), dispatch(tenant=f"t{n % 2}"))
        await queue.set_queue_limit(ConcurrencyLimit(queue="default", per_key=2))
        worker = QueueWorker(queue)
        assert await _claimed_keys(queue, worker) == {"t0": 2, "t1": 2}
        assert await worker.leases.claim_many("default", 50, limited=True) == []
        await worker.close()


async def test_a_payload_field_or_the_dispatch_names_the_key(db_url: str) -> None:
    async with open_queue(db_url, _uploads()) as queue:
        await queue.set_queue_limit(ConcurrencyLimit(queue="default", per_key=1))
        # Two accounts across three tenants: the account is the key, not the tenant.
        for n, (tenant, account) in enumerate([("a", "x"), ("b", "x"), ("c", "y")]):
            await queue.enqueue(Upload(account, n), dispatch(tenant=tenant))
        # The dispatch's key wins over the payload's.
        await queue.enqueue(Upload("x", 9), dispatch(tenant="d", partition_key="z"))
        worker = QueueWorker(queue)
        claimed = await worker.leases.claim_many("default", 50, limited=True)
        assert sorted(job.tenant_id for job in claimed) == ["a", "c", "d"]
        await worker.close()


async def test_a_bad_key_from_the_payload_is_refused_and_nothing_is_stored(db_url: str) -> None:
    async with open_queue(db_url, _uploads()) as queue:
        with pytest.raises(ValidationError) as raised:
            await queue.enqueue(Upload("   "), dispatch())
        assert raised.value.field == "partition_key"
        with pytest.raises(ValidationError) as long:
            await queue.enqueue(Upload("k" * 129), dispatch())
        assert long.value.field == "partition_key"
        reader = QueueInspector(queue.store)
        assert await reader.queue_counts() == []


async def test_the_limit_set_through_the_queue_is_listed_and_cleared(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        await queue.set_queue_limit(ConcurrencyLimit(queue="emails", concurrency=10, per_key=2))
        reader = QueueInspector(queue.store)
        (listed,) = await reader.queue_limits()
        assert (listed.queue, listed.concurrency, listed.per_key) == ("emails", 10, 2)
        with pytest.raises(ValidationError) as raised:
            await queue.set_queue_limit("emails")  # type: ignore[arg-type]
        assert raised.value.field == "limit"
        with pytest.raises(ValidationError):
            await queue.clear_queue_limit("Emails!")
        assert await queue.clear_queue_limit("emails") is True
        assert await queue.clear_queue_limit("emails") is False
        assert await reader.queue_limits() == []


def test_a_registry_declares_each_queue_limit_once() -> None:
    registry = JobRegistry()
    declared = registry.limit(ConcurrencyLimit(queue="emails", concurrency=3))
    assert registry.limits == (declared,)
    with pytest.raises(RegistrationError) as twice:
        registry.limit(ConcurrencyLimit(queue="emails", per_key=1))
    assert twice.value.field == "queue"
    with pytest.raises(RegistrationError) as wrong:
        registry.limit({"queue": "emails"})  # type: ignore[arg-type]
    assert wrong.value.field == "limit"


class Gate:
    """A handler whose jobs start, record that, and wait for :attr:`release`."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[int] = []
        self.changed = asyncio.Event()

    async def handle(self, job: Add, ctx: JobContext[Any]) -> None:
        self.started.append(job.amount)
        self.changed.set()
        await self.release.wait()

    async def until_started(self, count: int) -> None:
        async def wait() -> None:
            while len(self.started) < count:
                self.changed.clear()
                await self.changed.wait()

        await within(wait())


async def test_a_worker_stores_the_declared_limit_and_keeps_it(db_url: str) -> None:
    clock = ManualClock()
    gate = Gate()
    registry = registry_for(gate.handle)
    registry.limit(ConcurrencyLimit(queue="default", concurrency=2))
    async with (
        open_queue(db_url, registry, clock=clock) as queue,
        QueueWorker(queue, options=QUIET) as worker,
    ):
        for n in range(5):
            await queue.enqueue(Add(n), dispatch())
        task = asyncio.ensure_future(worker.run(["default"]))
        try:
            await gate.until_started(2)
            (stored,) = await QueueInspector(queue.store).queue_limits()
            assert (stored.queue, stored.concurrency, stored.per_key) == ("default", 2, None)
            counts = (await QueueInspector(queue.store).queue_counts("default"))[0]
            assert (counts.running, counts.ready + counts.delayed) == (2, 3), counts
            gate.release.set()
            await gate.until_started(5)  # each as a slot of the two frees
        finally:
            gate.release.set()
            worker.stop()
            await within(task)
        assert sorted(gate.started) == [0, 1, 2, 3, 4]


async def test_removing_a_limit_frees_the_waiting_jobs_at_the_next_read(db_url: str) -> None:
    clock = ManualClock()
    gate = Gate()
    async with (
        open_queue(db_url, registry_for(gate.handle), clock=clock, lease_duration=HOUR) as queue,
        open_queue(db_url, registry_for(gate.handle), clock=clock) as operator,
        QueueWorker(queue, options=QUIET) as worker,
    ):
        await operator.set_queue_limit(ConcurrencyLimit(queue="default", concurrency=1))
        for n in range(4):
            await queue.enqueue(Add(n), dispatch())
        task = asyncio.ensure_future(worker.run(["default"]))
        try:
            await gate.until_started(1)
            assert await operator.clear_queue_limit("default")
            await clock.advance(MINUTE)  # the worker's read of the paused set and the limits
            await gate.until_started(4)  # all of them at once: the one running still holds
            assert sorted(gate.started) == [0, 1, 2, 3]
        finally:
            gate.release.set()
            worker.stop()
            await within(task)


def test_partition_by_names_the_tenant_or_a_payload_field() -> None:
    registry = JobRegistry()

    async def handler(job: Any, ctx: JobContext[Any]) -> None:
        return None

    with pytest.raises(RegistrationError) as unknown:
        registry.register("tests.upload.v1", Upload, handler, partition_by="owner")
    assert unknown.value.field == "partition_by"
    with pytest.raises(RegistrationError):
        registry.register("tests.upload.v1", Upload, handler, partition_by=3)  # type: ignore[arg-type]
    registry.register("tests.upload.v1", Upload, handler, partition_by="account")
    assert registry.get("tests.upload.v1") is not None


def test_a_dispatch_partition_key_follows_the_key_rules() -> None:
    assert DispatchOptions(queue="q", partition_key="acct-1").partition_key == "acct-1"
    for bad in ("", "  ", "x" * 129, "a\nb", 5):
        with pytest.raises(ValidationError) as raised:
            DispatchOptions(queue="q", partition_key=bad)  # type: ignore[arg-type]
        assert raised.value.field == "partition_key"
