"""The claim / lease / acknowledge contract, on every database.

Every test drives a real database through :class:`DatabaseQueue` with a :class:`ManualClock`, so
lease expiries, retries and due times are exact to the millisecond.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import uuid
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import pytest

from caravel import (
    DatabaseQueue,
    IdempotencyConflictError,
    JobState,
    JobStatus,
    LeaseLostError,
    Leases,
    ValidationError,
)
from caravel.clock import from_ms
from caravel.preparation import prepare_job
from caravel.queue import PREPARE_CHUNK
from caravel.store.protocol import JobFilter, JobRef, QueueCounts
from caravel.testing import ManualClock
from tests.support import LEASE, Add, Report, dispatch, enqueue_and_claim, open_queue, status_of
from tests.support.databases import SqliteTemplate

LEASE_MS = 30_000
T0 = ManualClock().now_ms()
MS = timedelta(milliseconds=1)


async def all_jobs(queue: DatabaseQueue) -> list[JobStatus]:
    return await queue.store.job_list(JobFilter(limit=1000))


# ----- claim --------------------------------------------------------------------------------


async def test_claim_leases_the_next_due_job(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        job = await queue.enqueue(Add(1, note="n"), dispatch("k"))
        await clock.advance(timedelta(seconds=2))
        now = clock.now_ms()

        claimed = await Leases(queue).claim("default")

        assert claimed is not None
        assert claimed.job_id == job.job_id
        assert (claimed.queue, claimed.tenant_id, claimed.job_type) == (
            "default",
            "tenant-a",
            "tests.add.v1",
        )
        assert claimed.payload == '{"amount":1,"note":"n"}'
        assert claimed.due_at_ms == T0
        lease = claimed.lease
        assert lease.job_id == job.job_id
        assert lease.attempt == 1
        assert lease.max_attempts == 3
        assert lease.token != 0
        assert lease.claimed_at_ms == now
        assert lease.expires_at_ms == now + LEASE_MS
        assert lease.expires_at == from_ms(now + LEASE_MS)

        status = await status_of(queue, job.job_id)
        assert status.state is JobState.RUNNING
        assert status.attempt == 1
        assert status.started_at == from_ms(now)
        assert status.lease_expires_at == from_ms(now + LEASE_MS)
        assert status.updated_at == from_ms(now)
        assert status.finished_at is None
        assert status.due_at == from_ms(T0)


async def test_running_job_is_not_claimed_twice(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        await queue.enqueue(Add(1), dispatch())
        assert await Leases(queue).claim("default") is not None
        assert await Leases(queue).claim("default") is None


async def test_not_before_is_stored_rounded_up_to_the_millisecond(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        # X.0005 s: due at X.001, never at X.000.
        not_before = from_ms(T0 + 10_000) + timedelta(microseconds=500)
        job = await queue.enqueue(Add(1), dispatch(not_before=not_before))
        status = await status_of(queue, job.job_id)
        assert status.due_at == from_ms(T0 + 10_001)
        assert status.state is JobState.READY

        assert await Leases(queue).claim("default") is None
        await clock.set(from_ms(T0 + 10_000))
        assert await Leases(queue).claim("default") is None

        await clock.advance(MS)
        claimed = await Leases(queue).claim("default")
        assert claimed is not None
        assert claimed.job_id == job.job_id
        assert claimed.due_at_ms == T0 + 10_001


async def test_claim_on_empty_or_other_queue_returns_none(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        assert await Leases(queue).claim("default") is None
        job = await queue.enqueue(Add(1), dispatch(queue="other"))
        assert await Leases(queue).claim("default") is None
        claimed = await Leases(queue).claim("other")
        assert claimed is not None
        assert claimed.job_id == job.job_id
        assert claimed.queue == "other"
        assert await Leases(queue).claim("other") is None


async def test_claims_come_in_due_time_order(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        third = await queue.enqueue(Add(3), dispatch(not_before=from_ms(T0 + 3_000)))
        first = await queue.enqueue(Add(1), dispatch())
        fourth = await queue.enqueue(Add(4), dispatch(not_before=from_ms(T0 + 4_000)))
        second = await queue.enqueue(Add(2), dispatch(not_before=from_ms(T0 + 1_000)))
        await clock.advance(timedelta(seconds=5))

        order = []
        while (claimed := await Leases(queue).claim("default")) is not None:
            order.append(claimed.job_id)

        assert order == [first.job_id, second.job_id, third.job_id, fourth.job_id]


# ----- complete -----------------------------------------------------------------------------


async def test_complete_with_current_lease_marks_completed(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        job, claimed = await enqueue_and_claim(queue)
        await clock.advance(timedelta(seconds=3))

        await Leases(queue).complete(claimed.lease)

        status = await status_of(queue, job.job_id)
        assert status.state is JobState.COMPLETED
        assert status.finished_at == from_ms(T0 + 3_000)
        assert status.updated_at == from_ms(T0 + 3_000)
        assert status.lease_expires_at is None
        assert status.attempt == 1
        assert status.last_failure is None

        # A completed job never runs again, and its lease is spent.
        await clock.advance(timedelta(days=1))
        assert await Leases(queue).claim("default") is None
        with pytest.raises(LeaseLostError):
            await Leases(queue).complete(claimed.lease)


async def test_complete_with_stale_lease_raises_and_changes_nothing(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        job, first = await enqueue_and_claim(queue)
        await clock.advance(LEASE)
        second = await Leases(queue).claim("default")
        assert second is not None
        assert second.job_id == job.job_id
        await clock.advance(timedelta(seconds=1))

        before = await status_of(queue, job.job_id)
        with pytest.raises(LeaseLostError) as caught:
            await Leases(queue).complete(first.lease)
        assert caught.value.job_id == job.job_id
        assert await status_of(queue, job.job_id) == before
        assert before.state is JobState.RUNNING

        # The current holder is unaffected.
        await Leases(queue).complete(second.lease)
        assert (await status_of(queue, job.job_id)).state is JobState.COMPLETED


# ----- expiry and reclaim -------------------------------------------------------------------


async def test_expired_lease_is_claimable_again_with_new_token(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        job, first = await enqueue_and_claim(queue)

        await clock.advance(LEASE - MS)
        assert await Leases(queue).claim("default") is None  # still leased

        await clock.advance(MS)  # the lease ends now
        second = await Leases(queue).claim("default")
        assert second is not None
        assert second.job_id == job.job_id
        assert second.lease.token != first.lease.token
        assert second.attempt == first.attempt + 1 == 2
        assert second.lease.claimed_at_ms == T0 + LEASE_MS
        assert second.lease.expires_at_ms == T0 + 2 * LEASE_MS
        status = await status_of(queue, job.job_id)
        assert status.attempt == 2
        assert status.state is JobState.RUNNING
        assert status.lease_expires_at == from_ms(T0 + 2 * LEASE_MS)


async def test_every_claim_counts_and_last_expiry_dead_letters(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        job = await queue.enqueue(Add(1), dispatch())
        tokens = set()
        for attempt in (1, 2, 3):
            claimed = await Leases(queue).claim("default")
            assert claimed is not None
            assert claimed.attempt == attempt
            tokens.add(claimed.lease.token)
            await clock.advance(LEASE)
        assert len(tokens) == 3

        # The third lease expired with no attempts left: the next claim dead-letters it.
        assert await Leases(queue).claim("default") is None
        status = await status_of(queue, job.job_id)
        assert status.state is JobState.DEAD_LETTER
        assert status.last_failure == "LeaseExpired"
        assert status.attempt == 3
        assert status.finished_at == from_ms(clock.now_ms())
        assert status.lease_expires_at is None

        await clock.advance(timedelta(days=30))
        assert await Leases(queue).claim("default") is None
        assert (await status_of(queue, job.job_id)).state is JobState.DEAD_LETTER


async def test_expired_exhausted_jobs_are_dead_lettered_and_claim_returns_next_job(
    db_url: str,
) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock, max_attempts=1) as queue:
        exhausted = []
        for n in range(3):
            exhausted.append((await queue.enqueue(Add(n), dispatch())).job_id)
            await clock.advance(MS)
        for _ in exhausted:
            assert await Leases(queue).claim("default") is not None
        await clock.advance(LEASE + MS)
        good = await queue.enqueue(Add(99), dispatch())  # due after the expired leases

        claimed = await Leases(queue).claim("default")

        assert claimed is not None
        assert claimed.job_id == good.job_id
        assert claimed.attempt == 1
        for job_id in exhausted:
            status = await status_of(queue, job_id)
            assert status.state is JobState.DEAD_LETTER
            assert status.last_failure == "LeaseExpired"
            assert status.attempt == 1
        assert await Leases(queue).claim("default") is None


async def test_claim_sources_keep_waiting_jobs_and_expired_leases_apart(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock, max_attempts=2) as queue:
        # Everything happens one millisecond apart: jobs due (or leases ending) in the same
        # millisecond are claimed in no particular order.
        crashed = []
        for n in range(3):
            crashed.append((await queue.enqueue(Add(n), dispatch())).job_id)
            await clock.advance(MS)
        for _ in crashed:
            assert len(await Leases(queue).claim_many("default", 1)) == 1
            await clock.advance(MS)
        await clock.advance(LEASE)  # those three leases have ended, with one attempt left each
        waiting = []
        for n in range(10, 12):
            waiting.append((await queue.enqueue(Add(n), dispatch())).job_id)
            await clock.advance(MS)

        # A batch of waiting jobs never takes over an expired lease, however large.
        ready = await Leases(queue).claim_many("default", 10, source="ready")
        assert [c.job_id for c in ready] == waiting
        assert all(c.attempt == 1 for c in ready)
        assert await Leases(queue).claim_many("default", 10, source="ready") == []
        for claimed in ready:
            await Leases(queue).complete(claimed.lease)

        # Expired leases are taken over only when asked for, oldest first.
        taken = await Leases(queue).claim_many("default", 1, source="expired")
        assert [(c.job_id, c.attempt) for c in taken] == [(crashed[0], 2)]
        rest = await Leases(queue).claim_many("default", 10, source="expired")
        assert [c.job_id for c in rest] == crashed[1:]

        # Once the last attempt's lease runs out, an expired-lease claim dead-letters the job.
        await clock.advance(LEASE)
        assert await Leases(queue).claim_many("default", 10, source="ready") == []
        assert (await status_of(queue, crashed[0])).state is JobState.RUNNING
        assert await Leases(queue).claim_many("default", 10, source="expired") == []
        for job_id in crashed:
            status = await status_of(queue, job_id)
            assert (status.state, status.last_failure) == (JobState.DEAD_LETTER, "LeaseExpired")
        with pytest.raises(ValidationError) as caught:
            await Leases(queue).claim_many("default", 1, source="stale")  # type: ignore[arg-type]
        assert caught.value.field == "source"


# ----- fail ---------------------------------------------------------------------------------


async def test_fail_schedules_retries_with_capped_backoff_then_dead_letters(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(
        db_url, clock=clock, max_attempts=5, max_retry_delay=timedelta(seconds=12)
    ) as queue:
        job = await queue.enqueue(Add(1), dispatch())
        # Backoff after attempts 1..4: 5 s, 10 s, then 20 s and 40 s capped at 12 s.
        for attempt, backoff_ms in ((1, 5_000), (2, 10_000), (3, 12_000), (4, 12_000)):
            claimed = await Leases(queue).claim("default")
            assert claimed is not None
            assert claimed.attempt == attempt
            await clock.advance(timedelta(seconds=1))
            now = clock.now_ms()

            outcome = await Leases(queue).fail(claimed.lease, "HandlerFailed")

            assert not outcome.dead_lettered
            assert outcome.retry_at == from_ms(now + backoff_ms)
            status = await status_of(queue, job.job_id)
            assert status.state is JobState.READY
            assert status.attempt == attempt
            assert status.due_at == from_ms(now + backoff_ms)
            assert status.last_failure == "HandlerFailed"
            assert status.lease_expires_at is None
            assert status.finished_at is None

            await clock.advance(timedelta(milliseconds=backoff_ms) - MS)
            assert await Leases(queue).claim("default") is None
            await clock.advance(MS)

        last = await Leases(queue).claim("default")
        assert last is not None
        assert last.attempt == 5
        outcome = await Leases(queue).fail(last.lease, "InvalidPayload")
        assert outcome.dead_lettered
        assert outcome.retry_at is None
        status = await status_of(queue, job.job_id)
        assert status.state is JobState.DEAD_LETTER
        assert status.attempt == 5
        assert status.last_failure == "InvalidPayload"
        assert status.finished_at == from_ms(clock.now_ms())
        await clock.advance(timedelta(days=1))
        assert await Leases(queue).claim("default") is None


async def test_fail_on_the_only_attempt_dead_letters(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock, max_attempts=1) as queue:
        job, claimed = await enqueue_and_claim(queue)
        outcome = await Leases(queue).fail(claimed.lease, "HandlerFailed")
        assert outcome.dead_lettered
        status = await status_of(queue, job.job_id)
        assert status.state is JobState.DEAD_LETTER
        assert status.last_failure == "HandlerFailed"


async def test_fail_with_stale_lease_raises_and_changes_nothing(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        job, first = await enqueue_and_claim(queue)
        await clock.advance(LEASE)
        second = await Leases(queue).claim("default")
        assert second is not None
        await clock.advance(timedelta(seconds=1))

        before = await status_of(queue, job.job_id)
        with pytest.raises(LeaseLostError) as caught:
            await Leases(queue).fail(first.lease, "HandlerFailed")
        assert caught.value.job_id == job.job_id
        assert await status_of(queue, job.job_id) == before

        # After completion, a late failure report is rejected too.
        await Leases(queue).complete(second.lease)
        done = await status_of(queue, job.job_id)
        with pytest.raises(LeaseLostError):
            await Leases(queue).fail(second.lease, "HandlerFailed")
        assert await status_of(queue, job.job_id) == done


# ----- renew --------------------------------------------------------------------------------


async def test_renew_extends_the_lease_without_an_attempt(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        job, claimed = await enqueue_and_claim(queue)
        await clock.advance(timedelta(seconds=10))

        renewed = await Leases(queue).renew(claimed.lease)

        assert renewed is not None
        assert renewed.job_id == job.job_id
        assert renewed.token == claimed.lease.token
        assert renewed.attempt == 1
        assert renewed.claimed_at_ms == T0
        assert renewed.expires_at_ms == T0 + 10_000 + LEASE_MS
        status = await status_of(queue, job.job_id)
        assert status.attempt == 1
        assert status.lease_expires_at == from_ms(T0 + 10_000 + LEASE_MS)

        # The extension is real: nobody can claim the job at the old expiry.
        await clock.set(from_ms(T0 + LEASE_MS))
        assert await Leases(queue).claim("default") is None

        # Renewing again with the renewed lease works, and completing with it too.
        again = await Leases(queue).renew(renewed)
        assert again is not None
        assert again.expires_at_ms == T0 + 2 * LEASE_MS
        await Leases(queue).complete(again)
        assert (await status_of(queue, job.job_id)).state is JobState.COMPLETED


async def test_renewal_of_an_expired_lease_is_rejected(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        job, claimed = await enqueue_and_claim(queue)
        await clock.advance(LEASE)  # expired, not yet reclaimed

        before = await status_of(queue, job.job_id)
        assert await Leases(queue).renew(claimed.lease) is None
        assert await status_of(queue, job.job_id) == before


async def test_renewal_after_completion_is_rejected(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        job, claimed = await enqueue_and_claim(queue)
        await Leases(queue).complete(claimed.lease)
        await clock.advance(timedelta(seconds=1))

        assert await Leases(queue).renew(claimed.lease) is None
        status = await status_of(queue, job.job_id)
        assert status.state is JobState.COMPLETED
        assert status.lease_expires_at is None


async def test_renewal_of_a_superseded_lease_is_rejected(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        job, first = await enqueue_and_claim(queue)
        await clock.advance(LEASE)
        second = await Leases(queue).claim("default")
        assert second is not None
        await clock.advance(timedelta(seconds=1))

        before = await status_of(queue, job.job_id)
        assert await Leases(queue).renew(first.lease) is None
        assert await status_of(queue, job.job_id) == before
        assert await Leases(queue).renew(second.lease) is not None


async def test_renewal_never_passes_the_maximum_lease_lifetime(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock, max_lease_lifetime=timedelta(seconds=45)) as queue:
        job, claimed = await enqueue_and_claim(queue)
        lease = claimed.lease

        await clock.advance(timedelta(seconds=10))
        lease_1 = await Leases(queue).renew(lease)
        assert lease_1 is not None
        assert lease_1.expires_at_ms == T0 + 40_000

        await clock.advance(timedelta(seconds=10))
        lease_2 = await Leases(queue).renew(lease_1)
        assert lease_2 is not None
        assert lease_2.expires_at_ms == T0 + 45_000  # capped, not T0 + 50 s
        assert lease_2.claimed_at_ms == T0

        await clock.advance(timedelta(seconds=20))
        lease_3 = await Leases(queue).renew(lease_2)
        assert lease_3 is not None
        assert lease_3.expires_at_ms == T0 + 45_000

        await clock.advance(timedelta(seconds=5))  # the lifetime is used up
        assert await Leases(queue).renew(lease_3) is None
        status = await status_of(queue, job.job_id)
        assert status.lease_expires_at == from_ms(T0 + 45_000)
        assert status.attempt == 1


async def test_lifetime_equal_to_lease_means_renewal_never_extends(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock, max_lease_lifetime=LEASE) as queue:
        await queue.enqueue(Add(1), dispatch())
        claimed = await Leases(queue).claim("default")
        assert claimed is not None
        await clock.advance(timedelta(seconds=10))
        renewed = await Leases(queue).renew(claimed.lease)
        assert renewed is not None
        assert renewed.expires_at_ms == T0 + LEASE_MS  # not T0 + 40 s
        await clock.set(from_ms(T0 + LEASE_MS))
        assert await Leases(queue).renew(claimed.lease) is None


# ----- replay -------------------------------------------------------------------------------


async def _dead_letter(queue: DatabaseQueue, job: object, **extra: object) -> UUID:
    result = await queue.enqueue(job, dispatch(max_attempts=1, **extra))
    claimed = await Leases(queue).claim(str(extra.get("queue", "default")))
    assert claimed is not None
    assert claimed.job_id == result.job_id
    await Leases(queue).fail(claimed.lease, "HandlerFailed")
    return result.job_id


async def test_replay_makes_a_dead_letter_run_again(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        job_id = await _dead_letter(queue, Add(5, note="again"))
        payload = await queue.store.job_get_payload(JobRef(job_id, "default", "tenant-a"))
        await clock.advance(timedelta(minutes=10))
        now = clock.now_ms()

        assert await queue.replay(job_id, "default", "tenant-a") is True

        status = await status_of(queue, job_id)
        assert status.job_id == job_id
        assert status.state is JobState.READY
        assert status.attempt == 0
        assert status.max_attempts == 1
        assert status.due_at == from_ms(now)
        assert status.last_failure is None
        assert status.finished_at is None
        assert status.lease_expires_at is None
        assert await queue.store.job_get_payload(JobRef(job_id, "default", "tenant-a")) == payload
        assert [j.job_id for j in await all_jobs(queue)] == [job_id]

        claimed = await Leases(queue).claim("default")  # due now, no clock movement needed
        assert claimed is not None
        assert claimed.job_id == job_id
        assert claimed.attempt == 1
        assert claimed.payload == payload == '{"amount":5,"note":"again"}'


async def test_replay_accepts_a_job_id_string(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        job_id = await _dead_letter(queue, Add(1))
        assert await queue.replay(str(job_id), "default", "tenant-a") is True


async def test_replay_refuses_anything_but_a_dead_letter_of_that_queue_and_tenant(
    db_url: str,
) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        dead = await _dead_letter(queue, Add(1))
        dead_before = await status_of(queue, dead)

        assert await queue.replay(uuid.uuid4(), "default", "tenant-a") is False
        assert await queue.replay(dead, "other", "tenant-a") is False
        assert await queue.replay(dead, "default", "tenant-b") is False
        assert await queue.replay(dead, "default", "Tenant-A") is False
        assert await queue.replay(dead, "default", "TENANT-A") is False
        assert await status_of(queue, dead) == dead_before

        ready = (await queue.enqueue(Add(2), dispatch())).job_id
        assert await queue.replay(ready, "default", "tenant-a") is False

        running = await Leases(queue).claim("default")
        assert running is not None
        assert running.job_id == ready
        running_before = await status_of(queue, ready)
        assert await queue.replay(ready, "default", "tenant-a") is False
        assert await status_of(queue, ready) == running_before

        await Leases(queue).complete(running.lease)
        completed_before = await status_of(queue, ready)
        assert await queue.replay(ready, "default", "tenant-a") is False
        assert await status_of(queue, ready) == completed_before

        # A job that failed but still has attempts left is not a dead letter either.
        retrying = (await queue.enqueue(Add(3), dispatch())).job_id
        claimed = await Leases(queue).claim("default")
        assert claimed is not None
        await Leases(queue).fail(claimed.lease, "HandlerFailed")
        retrying_before = await status_of(queue, retrying)
        assert await queue.replay(retrying, "default", "tenant-a") is False
        assert await status_of(queue, retrying) == retrying_before


# ----- get_status ---------------------------------------------------------------------------


async def test_get_status_matches_id_queue_and_exact_tenant(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        job = await queue.enqueue(Add(1), dispatch(queue="mail", tenant="Tenant-A"))
        found = await queue.get_status(job.job_id, "mail", "Tenant-A")
        assert found is not None
        assert found.job_id == job.job_id
        assert found.tenant_id == "Tenant-A"
        assert await queue.get_status(str(job.job_id), "mail", "Tenant-A") == found

        assert await queue.get_status(uuid.uuid4(), "mail", "Tenant-A") is None
        assert await queue.get_status(job.job_id, "default", "Tenant-A") is None
        assert await queue.get_status(job.job_id, "mail", "tenant-b") is None
        assert await queue.get_status(job.job_id, "mail", "tenant-a") is None
        assert await queue.get_status(job.job_id, "mail", "TENANT-A") is None
        assert await queue.get_status(job.job_id, "mail", "Tenant-A ") is None


# ----- per-job attempts ---------------------------------------------------------------------


async def test_per_job_max_attempts_overrides_the_queue_default(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock, max_attempts=3) as queue:
        once = await queue.enqueue(Add(1), dispatch(max_attempts=1))
        claimed = await Leases(queue).claim("default")
        assert claimed is not None
        assert claimed.lease.max_attempts == 1
        outcome = await Leases(queue).fail(claimed.lease, "HandlerFailed")
        assert outcome.dead_lettered
        assert (await status_of(queue, once.job_id)).state is JobState.DEAD_LETTER

        five = await queue.enqueue(Add(2), dispatch(max_attempts=5))
        assert (await status_of(queue, five.job_id)).max_attempts == 5
        for attempt in range(1, 5):
            claimed = await Leases(queue).claim("default")
            assert claimed is not None
            assert claimed.job_id == five.job_id
            assert claimed.attempt == attempt
            assert claimed.lease.max_attempts == 5
            outcome = await Leases(queue).fail(claimed.lease, "HandlerFailed")
            assert not outcome.dead_lettered, f"attempt {attempt} of 5 must retry"
            await clock.advance(timedelta(minutes=5))
        claimed = await Leases(queue).claim("default")
        assert claimed is not None
        assert claimed.attempt == 5
        assert (await Leases(queue).fail(claimed.lease, "HandlerFailed")).dead_lettered

        default = await queue.enqueue(Add(3), dispatch())
        assert (await status_of(queue, default.job_id)).max_attempts == 3


# ----- enqueue_many -------------------------------------------------------------------------


async def test_enqueue_many_returns_results_in_order(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        items = [
            (Add(1), dispatch()),
            (Report(report_id="r", pages=[1, 2]), dispatch(queue="reports")),
            (Add(2), dispatch("k2")),
        ]
        results = await queue.enqueue_many(items)

        assert len(results) == 3
        assert len({r.job_id for r in results}) == 3
        assert not any(r.already_enqueued for r in results)
        payloads = [
            await queue.store.job_get_payload(JobRef(r.job_id, d.queue, d.tenant_id))
            for r, (_, d) in zip(results, items, strict=True)
        ]
        assert payloads == [
            '{"amount":1,"note":""}',
            '{"pages":[1,2],"report_id":"r"}',
            '{"amount":2,"note":""}',
        ]
        assert await queue.enqueue_many([]) == []


async def test_enqueue_many_honours_existing_keys(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        original = await queue.enqueue(Add(1), dispatch("k1"))
        results = await queue.enqueue_many(
            [(Add(9), dispatch("k9")), (Add(1), dispatch("k1")), (Add(8), dispatch())]
        )
        assert results[1].job_id == original.job_id
        assert [r.already_enqueued for r in results] == [False, True, False]
        assert len(await all_jobs(queue)) == 3


async def test_enqueue_many_same_key_twice_in_one_call(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        results = await queue.enqueue_many(
            [(Add(1), dispatch("dup")), (Add(5), dispatch()), (Add(1), dispatch("dup"))]
        )
        assert results[0].already_enqueued is False
        assert results[2].already_enqueued is True
        assert results[2].job_id == results[0].job_id
        assert results[1].job_id != results[0].job_id
        jobs = await all_jobs(queue)
        assert sorted(j.job_id for j in jobs) == sorted([results[0].job_id, results[1].job_id])


@pytest.mark.parametrize(
    "second",
    [Add(2), Report(report_id="r")],
    ids=["other-payload", "other-type"],
)
async def test_enqueue_many_conflict_in_one_call_writes_nothing(
    db_url: str, second: object
) -> None:
    async with open_queue(db_url) as queue:
        with pytest.raises(IdempotencyConflictError):
            await queue.enqueue_many(
                [(Add(7), dispatch("fine")), (Add(1), dispatch("dup")), (second, dispatch("dup"))]
            )
        assert await all_jobs(queue) == []
        # The rollback left the keys free.
        fine = await queue.enqueue(Add(7), dispatch("fine"))
        assert fine.already_enqueued is False


async def test_enqueue_many_conflict_with_existing_job_writes_nothing(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        original = await queue.enqueue(Add(1), dispatch("k1"))
        with pytest.raises(IdempotencyConflictError) as caught:
            await queue.enqueue_many([(Add(5), dispatch()), (Add(2), dispatch("k1"))])
        assert caught.value.job_id == original.job_id
        assert [j.job_id for j in await all_jobs(queue)] == [original.job_id]


# ----- queue_counts -------------------------------------------------------------------------


async def test_queue_counts_reports_each_state(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        completed = await queue.enqueue(Add(1), dispatch())
        await clock.advance(MS)
        dead = await queue.enqueue(Add(2), dispatch(max_attempts=1))
        await clock.advance(MS)
        expired = await queue.enqueue(Add(3), dispatch())
        await clock.advance(MS)
        running = await queue.enqueue(Add(4), dispatch(not_before=from_ms(T0 + 10_000)))

        for expected in (completed, dead, expired):
            claimed = await Leases(queue).claim("default")
            assert claimed is not None
            assert claimed.job_id == expected.job_id
            if expected is completed:
                await Leases(queue).complete(claimed.lease)
            elif expected is dead:
                await Leases(queue).fail(claimed.lease, "HandlerFailed")
        await clock.set(from_ms(T0 + 10_000))
        claimed = await Leases(queue).claim("default")
        assert claimed is not None
        assert claimed.job_id == running.job_id  # lease until T0 + 40 s

        await clock.set(from_ms(T0 + 35_000))  # the third job's lease ran out at T0 + 30 s
        await queue.enqueue(Add(5), dispatch())
        await queue.enqueue(Add(6), dispatch())
        await queue.enqueue(Add(7), dispatch(not_before=from_ms(T0 + 3_600_000)))
        await queue.enqueue(Add(8), dispatch(queue="other"))
        now = clock.now_ms()

        counts = await queue.store.queue_counts("default", now)
        assert counts == [
            QueueCounts(
                queue="default",
                ready=2,
                delayed=1,
                running=1,
                expired=1,
                dead_letter=1,
                completed=1,
                oldest_ready_due_ms=now,  # the two ready jobs became due just now
            )
        ]
        everything = await queue.store.queue_counts(None, now)
        assert [c.queue for c in everything] == ["default", "other"]
        assert everything[0] == counts[0]
        assert everything[1] == QueueCounts("other", 1, 0, 0, 0, 0, 0, oldest_ready_due_ms=now)
        assert await queue.store.queue_counts("empty", now) == []

        # Counting changed nothing: the expired job is still running on its old lease.
        status = await status_of(queue, expired.job_id)
        assert status.state is JobState.RUNNING
        assert status.attempt == 1


async def test_a_sqlite_claim_that_waited_for_the_write_lock_starts_its_lease_after_the_wait(
    sqlite_template: SqliteTemplate, tmp_path: Path
) -> None:
    """The claim's clock is read before SQLite's write lock is won; when another process held
    the lock for a while, the lease must start when the claim really holds the job, or a
    second worker could take the job over almost at once."""
    path = tmp_path / "queue.db"
    clock = ManualClock()
    async with open_queue(sqlite_template.copy_to(path), clock=clock) as queue:
        job = await queue.enqueue(Add(1), dispatch())
        blocker = sqlite3.connect(path, isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")  # another process writing
            asyncio.get_running_loop().call_later(0.4, blocker.rollback)
            claimed = await Leases(queue).claim("default")
        finally:
            blocker.close()
        assert claimed is not None
        assert claimed.job_id == job.job_id
        waited = claimed.lease.claimed_at_ms - clock.now_ms()
        assert 350 <= waited < 5_000
        assert claimed.lease.expires_at_ms == claimed.lease.claimed_at_ms + LEASE_MS
        # Without a wait, the lease starts exactly at the clock's time.
        await Leases(queue).complete(claimed.lease)
        second = await queue.enqueue(Add(2), dispatch())
        again = await Leases(queue).claim("default")
        assert again is not None
        assert again.job_id == second.job_id
        assert again.lease.claimed_at_ms == clock.now_ms()


async def test_enqueue_many_large_batch_settles_every_kind_of_duplicate(db_url: str) -> None:
    # Larger than the dialects' small-insert path: PostgreSQL takes its array insert here.
    async with open_queue(db_url) as queue:
        original = await queue.enqueue(Add(1), dispatch("k-existing"))
        items = [(Add(100 + i), dispatch(f"k-{i}")) for i in range(40)]
        items[10] = (Add(1), dispatch("k-existing"))  # an existing key, same content
        items[30] = (Add(100 + 5), dispatch("k-5"))  # the same key earlier in this call
        results = await queue.enqueue_many(items)

        assert results[10].job_id == original.job_id
        assert results[30].job_id == results[5].job_id
        assert [i for i, r in enumerate(results) if r.already_enqueued] == [10, 30]
        assert len(await all_jobs(queue)) == 1 + 38

        # Every job again, as a relay resending the same intents (same ids): nothing new.
        again = await queue.enqueue_many(items)
        assert [r.job_id for r in again] == [r.job_id for r in results]
        assert all(r.already_enqueued for r in again)
        assert len(await all_jobs(queue)) == 1 + 38


async def test_enqueue_many_large_batch_resent_with_the_same_ids(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        now = queue.clock.now_ms()
        prepared = [
            prepare_job(queue.registry, queue.options, Add(i), dispatch(), now) for i in range(20)
        ]
        first = await queue.insert_prepared(prepared[:12])
        assert not any(r.already_enqueued for r in first)
        # Half of these ids are stored already (no idempotency keys: the id is the identity).
        second = await queue.insert_prepared(prepared[6:])
        assert [r.already_enqueued for r in second] == [True] * 6 + [False] * 8
        assert [r.job_id for r in second] == [j.id for j in prepared[6:]]
        assert len(await all_jobs(queue)) == 20

        # A new job first, stored ones after it (on PostgreSQL the copy meets them mid-batch).
        fresh = [
            prepare_job(queue.registry, queue.options, Add(100 + i), dispatch(), now)
            for i in range(3)
        ]
        third = await queue.insert_prepared([fresh[0], *prepared[:10], *fresh[1:]])
        assert [r.already_enqueued for r in third] == [False] + [True] * 10 + [False] * 2
        assert [r.job_id for r in third] == [fresh[0].id, *(j.id for j in prepared[:10])] + [
            j.id for j in fresh[1:]
        ]
        assert len(await all_jobs(queue)) == 23


async def test_enqueue_many_in_chunks_keys_and_order_hold_across_chunks(db_url: str) -> None:
    # Several preparation chunks: the same key in the first and the last chunk, and an existing
    # key in the middle one.
    size = PREPARE_CHUNK * 2 + 17
    async with open_queue(db_url) as queue:
        original = await queue.enqueue(Add(1), dispatch("k-existing"))
        items = [(Add(1000 + i), dispatch(f"k-{i}")) for i in range(size)]
        items[PREPARE_CHUNK + 3] = (Add(1), dispatch("k-existing"))
        items[size - 1] = (Add(1000 + 2), dispatch("k-2"))
        results = await queue.enqueue_many(items)

        assert len(results) == size
        assert results[PREPARE_CHUNK + 3].job_id == original.job_id
        assert results[size - 1].job_id == results[2].job_id
        repeated = [i for i, r in enumerate(results) if r.already_enqueued]
        assert repeated == [PREPARE_CHUNK + 3, size - 1]
        stored = await queue.store.job_list(JobFilter(limit=10_000))
        assert len(stored) == size - 1  # the original plus size - 2 new jobs
        payload = await queue.store.job_get_payload(
            JobRef(results[-2].job_id, "default", "tenant-a")
        )
        assert payload == f'{{"amount":{1000 + size - 2},"note":""}}'


@pytest.mark.parametrize("bad_at", [0, PREPARE_CHUNK * 2 + 5], ids=["first-chunk", "last-chunk"])
async def test_enqueue_many_in_chunks_invalid_job_writes_nothing(db_url: str, bad_at: int) -> None:
    async with open_queue(db_url) as queue:
        items = [(Add(i), dispatch(f"k-{i}")) for i in range(PREPARE_CHUNK * 2 + 10)]
        items[bad_at] = (Add(1, note="\ud800"), dispatch())  # a lone surrogate
        with pytest.raises(ValidationError) as caught:
            await queue.enqueue_many(items)
        assert caught.value.field == "payload"
        assert await all_jobs(queue) == []
        # Nothing was kept: the same keys go in afresh.
        again = await queue.enqueue_many(items[1:4])
        assert not any(r.already_enqueued for r in again)


@pytest.mark.parametrize(
    "taken_at", [7, PREPARE_CHUNK + 7], ids=["taken-in-first-chunk", "taken-in-chunk-before-bad"]
)
async def test_enqueue_many_in_chunks_invalid_job_after_a_collision_writes_nothing(
    db_url: str, taken_at: int
) -> None:
    # A key that is already taken, and a bad job in the last chunk: the bad job must be
    # reported and nothing written, whatever the store tried first. (On PostgreSQL a COPY that
    # meets the taken key is retried by the path that skips taken keys; when that COPY is still
    # running while the bad chunk is prepared, the bad job must not be lost in the retry.)
    async with open_queue(db_url) as queue:
        original = await queue.enqueue(Add(1), dispatch("k-taken"))
        items = [(Add(i), dispatch(f"k-{i}")) for i in range(PREPARE_CHUNK * 2 + 10)]
        items[taken_at] = (Add(1), dispatch("k-taken"))
        items[-3] = (Add(1, note="\ud800"), dispatch())
        with pytest.raises(ValidationError) as caught:
            await queue.enqueue_many(items)
        assert caught.value.field == "payload"
        assert [j.job_id for j in await all_jobs(queue)] == [original.job_id]


async def test_concurrent_large_batches_sharing_keys_make_one_job_per_key(db_url: str) -> None:
    # Two callers submit overlapping batches at the same moment: every key ends up with exactly
    # one job, and both callers are told the same id for it.
    size = PREPARE_CHUNK + 50
    async with open_queue(db_url) as queue:
        first = [(Add(i), dispatch(f"k-{i}")) for i in range(size)]
        second = [(Add(i), dispatch(f"k-{i}")) for i in range(size // 2, size + size // 2)]
        one, two = await asyncio.gather(queue.enqueue_many(first), queue.enqueue_many(second))

        ids = {f"k-{i}": r.job_id for i, r in zip(range(size), one, strict=True)}
        for i, result in zip(range(size // 2, size + size // 2), two, strict=True):
            ids.setdefault(f"k-{i}", result.job_id)
            assert result.job_id == ids[f"k-{i}"]
        shared = range(size // 2, size)
        # Each shared key was created by exactly one of the two calls.
        created = [
            (not one[i].already_enqueued) + (not two[i - size // 2].already_enqueued)
            for i in shared
        ]
        assert created == [1] * len(shared)
        stored = await queue.store.job_list(JobFilter(limit=10_000))
        assert len(stored) == size + size // 2
        assert {s.job_id for s in stored} == set(ids.values())


@pytest.mark.parametrize("delay", [0.0, 0.005, 0.02], ids=["at-once", "5ms", "20ms"])
async def test_a_cancelled_large_batch_is_all_or_nothing_and_the_queue_stays_usable(
    db_url: str, delay: float
) -> None:
    # The caller gives up while chunks are being prepared and written: the call either
    # committed whole or left nothing, and the next enqueues work on the same queue.
    size = PREPARE_CHUNK * 8
    async with open_queue(db_url) as queue:
        items = [(Add(i), dispatch(f"k-{i}")) for i in range(size)]
        call = asyncio.create_task(queue.enqueue_many(items))
        await asyncio.sleep(delay)  # real time: the cancel lands somewhere in real database I/O
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        stored = len(await queue.store.job_list(JobFilter(limit=10_000)))
        assert stored in (0, size)
        again = await queue.enqueue_many(items[:300])
        assert [r.already_enqueued for r in again] == [stored == size] * 300
        one = await queue.enqueue(Add(1), dispatch("after"))
        assert not one.already_enqueued
