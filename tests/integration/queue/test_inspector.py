"""The reads the dashboard added to the store seam, on every database: paging and ordering of
the job listing, and finished jobs counted per time bucket (``job_throughput``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from caravel import JobState, Leases, ValidationError
from caravel.store.protocol import ThroughputBucket, ThroughputQuery
from caravel.testing import ManualClock
from tests.support import Add, dispatch, inspector_of, open_queue

# A moment exactly on a five-minute boundary, so bucket edges are easy to read.
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
FIVE_MIN_MS = 300_000


async def test_list_jobs_pages_and_orders_by_creation(db_url: str) -> None:
    clock = ManualClock(T0)
    async with open_queue(db_url, clock=clock) as queue:
        created = []
        for n in range(7):
            created.append((await queue.enqueue(Add(n), dispatch())).job_id)
            await clock.advance(timedelta(seconds=1))
        newest = [j.job_id for j in await inspector_of(queue).list_jobs(limit=100)]
        assert newest == list(reversed(created))
        page = [j.job_id for j in await inspector_of(queue).list_jobs(limit=3, offset=3)]
        assert page == newest[3:6]
        oldest = [
            j.job_id
            for j in await inspector_of(queue).list_jobs(limit=3, offset=1, oldest_first=True)
        ]
        assert oldest == created[1:4]
        assert await inspector_of(queue).list_jobs(limit=3, offset=7) == []
        for offset in (-1, 10**6 + 1, True, 1.5):
            with pytest.raises(ValidationError):
                await inspector_of(queue).list_jobs(offset=offset)  # type: ignore[arg-type]


async def test_the_listing_with_last_attempts_checks_and_filters_as_list_jobs(
    db_url: str,
) -> None:
    clock = ManualClock(T0)
    async with open_queue(db_url, clock=clock, max_attempts=1) as queue:
        failed = (await queue.enqueue(Add(1), dispatch())).job_id
        claimed = await Leases(queue).claim("default")
        assert claimed is not None
        await Leases(queue).fail(claimed.lease, "HandlerFailed", detail="upstream said no")
        await clock.advance(timedelta(seconds=1))
        waiting = (await queue.enqueue(Add(2), dispatch(queue="other"))).job_id
        reader = inspector_of(queue)

        listed = await reader.list_jobs_with_last_attempt(limit=10)
        assert [(job.job_id, last is None) for job, last in listed] == [
            (waiting, True),
            (failed, False),
        ]
        [(job, last)] = await reader.list_jobs_with_last_attempt(
            state=JobState.DEAD_LETTER, tenant_id="tenant-a"
        )
        assert job.job_id == failed
        assert last is not None
        assert last.detail == "upstream said no"
        for bad, field in (
            ({"limit": 0}, "limit"),
            ({"offset": -1}, "offset"),
            ({"queue": "no spaces"}, "queue"),
            ({"tenant_id": ""}, "tenant_id"),
            ({"shown_state": "sleeping"}, "shown_state"),
        ):
            with pytest.raises(ValidationError) as raised:
                await reader.list_jobs_with_last_attempt(**bad)  # type: ignore[arg-type]
            assert raised.value.field == field


async def test_throughput_counts_completed_and_dead_lettered_per_bucket(db_url: str) -> None:
    clock = ManualClock(T0)
    async with open_queue(db_url, clock=clock, max_attempts=1) as queue:

        async def finish(queue_name: str, ok: bool) -> None:
            await queue.enqueue(Add(1), dispatch(queue=queue_name))
            (job,) = await Leases(queue).claim_many(queue_name, 1)
            if ok:
                await Leases(queue).complete(job.lease)
            else:
                await Leases(queue).fail(job.lease, "HandlerFailed")

        # 12:00-12:05: two completed in "a"; 12:05-12:10: one dead letter in "a", one completed
        # in "b"; 12:20-12:25: one completed in "a". A job still waiting does not count.
        await finish("a", True)
        await clock.advance(MINUTE)
        await finish("a", True)
        await clock.set(T0 + 6 * MINUTE)
        await finish("a", False)
        await finish("b", True)
        await clock.set(T0 + 22 * MINUTE)
        await finish("a", True)
        await queue.enqueue(Add(2), dispatch(queue="a"))

        await clock.set(T0 + 29 * MINUTE)
        found = await inspector_of(queue).throughput(window=timedelta(minutes=30))
        start = int(T0.timestamp() * 1000)
        starts = [start + i * FIVE_MIN_MS for i in range(6)]
        assert [b.start for b in found if b.queue == "a"] == starts
        assert [b.start for b in found if b.queue == "b"] == starts
        by = {(b.queue, b.start): (b.completed, b.dead_lettered) for b in found}
        assert [by[("a", s)] for s in starts] == [(2, 0), (0, 1), (0, 0), (0, 0), (1, 0), (0, 0)]
        assert [by[("b", s)] for s in starts] == [(0, 0), (1, 0), (0, 0), (0, 0), (0, 0), (0, 0)]

        only_b = await inspector_of(queue).throughput("b", window=timedelta(minutes=30))
        assert {b.queue for b in only_b} == {"b"}
        assert sum(b.completed for b in only_b) == 1

        # The store answers only non-empty buckets, for the exact range asked.
        query = ThroughputQuery(None, start, start + 10 * 60_000, FIVE_MIN_MS)
        sparse = await queue.store.job_throughput(query)
        assert sparse == [
            ThroughputBucket("a", start, 2, 0),
            ThroughputBucket("a", start + FIVE_MIN_MS, 0, 1),
            ThroughputBucket("b", start + FIVE_MIN_MS, 1, 0),
        ]

        # An hour later the window has moved past everything; a named queue still gets its
        # zero buckets.
        await clock.set(T0 + 2 * timedelta(hours=1))
        assert await inspector_of(queue).throughput() == []
        quiet = await inspector_of(queue).throughput("a")
        assert len(quiet) == 12
        assert all(b.completed == b.dead_lettered == 0 for b in quiet)


async def test_replayed_jobs_no_longer_count_as_failures(db_url: str) -> None:
    clock = ManualClock(T0)
    async with open_queue(db_url, clock=clock, max_attempts=1) as queue:
        accepted = await queue.enqueue(Add(1), dispatch())
        (job,) = await Leases(queue).claim_many("default", 1)
        await Leases(queue).fail(job.lease, "HandlerFailed")
        assert sum(b.dead_lettered for b in await inspector_of(queue).throughput()) == 1
        assert await queue.replay(accepted.job_id, "default", "tenant-a")
        assert await inspector_of(queue).throughput() == []


@pytest.mark.parametrize(
    ("window", "bucket"),
    [
        (timedelta(hours=1), timedelta(milliseconds=500)),
        (timedelta(0), timedelta(minutes=5)),
        (timedelta(days=30), timedelta(minutes=1)),
    ],
)
async def test_throughput_rejects_silly_windows(
    db_url: str, window: timedelta, bucket: timedelta
) -> None:
    async with open_queue(db_url) as queue:
        with pytest.raises(ValidationError):
            await inspector_of(queue).throughput(window=window, bucket=bucket)
    with pytest.raises(ValidationError):
        async with open_queue(db_url) as queue:
            await inspector_of(queue).throughput("Not A Queue")
