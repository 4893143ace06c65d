"""A job with a pending key through the real worker, on every database: while it runs the key is
free, so a new job takes it; when the running job fails and is retried it gives its key up, and
both jobs run (nothing accepted is lost)."""

from __future__ import annotations

from dataclasses import dataclass

from caravel import DatabaseQueue, DispatchOptions, JobContext, JobRegistry, JobState
from caravel.testing import ManualClock, drain

KEY = "sync:account-7"


@dataclass(frozen=True)
class Sync:
    n: int


async def test_a_retried_job_gives_its_key_to_the_job_enqueued_while_it_ran(db_url: str) -> None:
    registry = JobRegistry()
    ran: list[tuple[int, int]] = []
    holder: list[DatabaseQueue] = []
    where = DispatchOptions(queue="sync", pending_key=KEY, max_attempts=3)

    @registry.handles("tests.sync.v1", Sync)
    async def sync(job: Sync, ctx: JobContext[None]) -> None:
        ran.append((job.n, ctx.attempt))
        if job.n == 1 and ctx.attempt == 1:
            # Enqueued while this one runs: the key is free, so this is a new pending job.
            second = await holder[0].enqueue(Sync(2), where)
            assert not second.already_enqueued
            raise ConnectionError("the remote end is down")

    async with DatabaseQueue(db_url, registry, clock=ManualClock()) as queue:
        holder.append(queue)
        first = await queue.enqueue(Sync(1), where)
        await drain(queue, advance=True)
        status = await queue.get_status(first.job_id, "sync")
        assert status is not None
        assert (status.state, status.attempt, status.pending_key) == (JobState.COMPLETED, 2, None)
    assert sorted(ran) == [(1, 1), (1, 2), (2, 1)]
