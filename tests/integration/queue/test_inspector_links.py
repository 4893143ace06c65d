"""The operator's reads of chains and batches (:class:`QueueInspector`): every tenant's, on
SQLite, PostgreSQL and the in-memory store; a batch's members listed by ``batch_id``; a job
found by its id alone; and ids checked before any read, the error naming the field."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from uuid import uuid4

import pytest

from caravel import DatabaseQueue, DispatchOptions, JobRegistry, QueueInspector
from caravel.errors import ValidationError
from caravel.testing import ManualClock, drain


@dataclass(frozen=True)
class Note:
    text: str


registry = JobRegistry()


@registry.handles("notes.write.v1", Note)
async def write_note(job: Note, ctx: object) -> None:
    return None


async def test_batches_and_chains_of_every_tenant(db_url: str) -> None:
    await _batches_and_chains(db_url)


async def test_batches_and_chains_in_memory() -> None:
    await _batches_and_chains(f"memory://inspector-links-{uuid4().hex}")


async def _batches_and_chains(url: str) -> None:
    clock = ManualClock()
    async with (
        DatabaseQueue(url, registry, clock=clock) as queue,
        QueueInspector(url, clock=clock) as inspector,
    ):
        acme = DispatchOptions(queue="notes", tenant_id="acme")
        globex = DispatchOptions(queue="notes", tenant_id="globex")
        first = await queue.enqueue_batch(
            [(Note("a"), acme), (Note("b"), acme)],
            callback=(Note("done"), DispatchOptions(queue="callbacks", tenant_id="acme")),
        )
        await clock.advance(timedelta(seconds=1))
        second = await queue.enqueue_batch([(Note("c"), globex)])
        chain = await queue.enqueue_chain([(Note("1"), globex), (Note("2"), globex)])

        listed = await inspector.list_batches()
        assert [b.batch_id for b in listed] == [second.batch_id, first.batch_id]
        assert [b.batch_id for b in await inspector.list_batches(1, 1)] == [first.batch_id]
        got = await inspector.get_batch(str(first.batch_id))
        assert got is not None
        assert (got.tenant_id, got.total, got.pending, got.callback_id) == (
            "acme",
            2,
            2,
            first.callback_id,
        )
        assert await inspector.get_batch(uuid4()) is None

        members = await inspector.list_jobs(batch_id=first.batch_id)
        assert {j.job_id for j in members} == set(first.job_ids)
        assert first.callback_id is not None
        callback = await inspector.find_job(first.callback_id)
        assert callback is not None
        assert (callback.queue, callback.tenant_id, callback.held) == ("callbacks", "acme", True)
        assert await inspector.find_job(uuid4()) is None
        # Narrowed: what is given must match exactly, what is left out matches anything.
        ident = first.callback_id
        assert await inspector.find_job(ident, queue="callbacks") == callback
        assert await inspector.find_job(ident, tenant_id="acme") == callback
        assert await inspector.find_job(ident, queue="callbacks", tenant_id="acme") == callback
        assert await inspector.find_job(ident, queue="notes") is None
        assert await inspector.find_job(ident, tenant_id="Acme") is None
        assert await inspector.find_job(ident, queue="callbacks", tenant_id="globex") is None

        steps = await inspector.get_chain(chain.chain_id)
        assert steps is not None
        assert [s.job_id for s in steps.steps] == chain.job_ids
        assert [s.held for s in steps.steps] == [False, True]
        assert steps.state == "running"
        assert await inspector.get_chain(uuid4()) is None

        await drain(queue, queues=["notes"])
        done = await inspector.get_chain(chain.chain_id)
        assert done is not None
        assert done.state == "completed"
        finished = await inspector.get_batch(first.batch_id)
        assert finished is not None
        assert (finished.pending, finished.completed, finished.finished) == (0, 2, True)


async def test_ids_and_paging_are_checked(db_url: str) -> None:
    async with QueueInspector(db_url) as inspector:
        for call, field in (
            (inspector.get_batch("nope"), "batch_id"),
            (inspector.get_chain("nope"), "chain_id"),
            (inspector.find_job("nope"), "job_id"),
            (inspector.find_job(uuid4(), queue="Bad Queue"), "queue"),
            (inspector.find_job(uuid4(), tenant_id=""), "tenant_id"),
            (inspector.list_jobs(batch_id="nope"), "batch_id"),
            (inspector.list_batches(0), "limit"),
            (inspector.list_batches(10, -1), "offset"),
        ):
            with pytest.raises(ValidationError) as caught:
                await call
            assert caught.value.field == field
