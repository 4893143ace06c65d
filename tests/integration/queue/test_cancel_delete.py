"""Cancelling and deleting through the queue (and its synchronous shell), on every database: one
job by its exact id, queue and tenant, or many by filter with a dry run; bad input is refused
with the field named and nothing changed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from caravel import CancelOutcome, JobState, QueueOptions, SyncQueue, ValidationError
from caravel.testing import ManualClock
from tests.support import LEASE, Add, dispatch, enqueue_and_claim, make_registry, open_queue


async def test_cancel_and_delete_one_job(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        waiting = await queue.enqueue(Add(1), dispatch())
        assert await queue.cancel(waiting.job_id, "default", "tenant-a") is CancelOutcome.CANCELLED
        again = await queue.cancel(str(waiting.job_id), "default", "tenant-a")
        assert again is CancelOutcome.ALREADY_FINISHED
        assert await queue.cancel(waiting.job_id, "default") is CancelOutcome.NOT_FOUND
        assert await queue.delete(waiting.job_id, "default", "tenant-b") is False

        assert await queue.delete(waiting.job_id, "default", "tenant-a") is True

        assert await queue.get_status(waiting.job_id, "default", "tenant-a") is None


async def test_a_running_job_is_cancelled_and_its_lease_fenced(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        accepted, claimed = await enqueue_and_claim(queue)
        outcome = await queue.cancel(accepted.job_id, "default", "tenant-a")
        assert outcome is CancelOutcome.CANCELLED_RUNNING
        assert await queue.delete(accepted.job_id, "default", "tenant-a") is True  # finished

    async with open_queue(db_url) as queue:
        accepted, claimed = await enqueue_and_claim(queue)
        await queue.cancel(accepted.job_id, "default", "tenant-a")
        assert await queue.store.job_complete_many([claimed.lease], queue.clock.now_ms()) == set()
        status = await queue.get_status(accepted.job_id, "default", "tenant-a")
        assert status is not None
        assert status.state is JobState.CANCELLED


async def test_by_filter_with_a_dry_run_then_for_real(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        old = [await queue.enqueue(Add(n), dispatch()) for n in range(3)]
        await clock.advance(timedelta(days=8))
        await queue.enqueue(Add(9), dispatch())
        await queue.enqueue(Add(10), dispatch(tenant="tenant-b"))

        dry = await queue.cancel_matching(
            "default", tenant_id="tenant-a", older_than=timedelta(days=7), dry_run=True
        )
        assert (dry.matched, dry.changed) == ({JobState.READY: 3}, 0)
        counts = (await queue.store.queue_counts("default", clock.now_ms()))[0]
        assert (counts.ready, counts.cancelled) == (5, 0)

        done = await queue.cancel_matching(
            "default", tenant_id="tenant-a", older_than=timedelta(days=7)
        )
        assert (done.matched, done.changed) == ({JobState.READY: 3}, 3)
        for accepted in old:
            status = await queue.get_status(accepted.job_id, "default", "tenant-a")
            assert status is not None
            assert status.state is JobState.CANCELLED

        # Finished a day ago: deleted only by an age of less than that.
        await clock.advance(timedelta(days=1))
        kept = await queue.delete_matching("default", older_than=timedelta(days=2))
        assert (kept.matched, kept.changed) == ({}, 0)
        gone = await queue.delete_matching("default", states=["cancelled"])
        assert (gone.matched, gone.changed) == ({JobState.CANCELLED: 3}, 3)
        counts = (await queue.store.queue_counts("default", clock.now_ms()))[0]
        assert (counts.ready, counts.cancelled) == (2, 0)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        ({"states": ["completed"]}, "states"),
        ({"states": ["paused"]}, "states"),
        ({"states": []}, "states"),
        ({"older_than": timedelta(0)}, "older_than"),
        ({"older_than": 7}, "older_than"),
        ({"job_type": "Not A Wire Name"}, "job_type"),
        ({"tenant_id": ""}, "tenant_id"),
    ],
)
async def test_bad_filters_are_refused_naming_the_field(
    db_url: str, call: dict[str, object], field: str
) -> None:
    async with open_queue(db_url) as queue:
        accepted = await queue.enqueue(Add(1), dispatch())
        with pytest.raises(ValidationError) as raised:
            await queue.cancel_matching("default", **call)  # type: ignore[arg-type]
        assert raised.value.field == field
        with pytest.raises(ValidationError) as bad_queue:
            await queue.delete_matching("Bad Queue")
        assert bad_queue.value.field == "queue"
        status = await queue.get_status(accepted.job_id, "default", "tenant-a")
        assert status is not None
        assert status.state is JobState.READY


def test_the_sync_queue_cancels_and_deletes(db_url: str) -> None:
    options = QueueOptions(lease_duration=LEASE)
    with SyncQueue(db_url, make_registry(), options=options, clock=ManualClock()) as queue:
        one = queue.enqueue(Add(1), dispatch())
        two = queue.enqueue(Add(2), dispatch())
        assert queue.cancel(one.job_id, "default", "tenant-a") is CancelOutcome.CANCELLED
        assert queue.delete(one.job_id, "default", "tenant-a") is True
        found = queue.cancel_matching("default", dry_run=True)
        assert (found.matched, found.changed) == ({JobState.READY: 1}, 0)
        assert queue.cancel_matching("default").changed == 1
        assert queue.delete_matching("default").changed == 1
        assert queue.get_status(two.job_id, "default", "tenant-a") is None
