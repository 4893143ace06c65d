"""Priorities: ready jobs of a queue are claimed in order of their rank, the due time moved
earlier by ``PRIORITY_AGING_MS`` (6 s) per point of priority.

So higher priority goes first among jobs that became due at about the same time, equal
priorities go in due order, a delayed job is never claimed early, and a low-priority job ages:
a priority -100 job is claimed ahead of any priority-100 job that became due more than 1,200 s
after it, however steady the stream of them.
"""

from __future__ import annotations

import pytest

from caravel.limits import MAX_PRIORITY, MIN_PRIORITY, PRIORITY_AGING_MS
from caravel.store.protocol import ClaimSource, NewJob, SnoozedAttempt, Store
from tests.store.conformance.builders import (
    T0,
    claim,
    claim_one,
    fail,
    ids,
    insert,
    new_job,
    ref,
    status,
)

STEP = 60_000
#: How much longer a priority -100 job may wait than a priority-100 one: 1,200 s.
SPREAD = (MAX_PRIORITY - MIN_PRIORITY) * PRIORITY_AGING_MS


def test_the_spread_is_twenty_minutes() -> None:
    assert SPREAD == 1_200_000


@pytest.mark.parametrize("source", ["ready", "any"])
async def test_higher_priority_is_claimed_first_among_due_jobs(
    store: Store, source: ClaimSource
) -> None:
    # Due a millisecond apart, so equal priorities have an order.
    jobs = [new_job(n, due_at=T0 + n, priority=p) for n, p in enumerate([0, 100, -5, 7, -100, 7])]
    await insert(store, jobs)

    batch = await claim(store, T0 + 10, 3, source=source)
    rest = await claim(store, T0 + 10, 10, source=source)

    assert ids(batch.claimed) == ids([jobs[1], jobs[3], jobs[5]])
    assert ids(rest.claimed) == ids([jobs[0], jobs[2], jobs[4]])
    assert [job.priority for job in batch.claimed + rest.claimed] == [100, 7, 7, 0, -5, -100]


async def test_equal_priorities_are_claimed_in_due_order(store: Store) -> None:
    offsets = [30, 10, 40, 0, 20]
    jobs = [new_job(n, due_at=T0 + o, priority=25) for n, o in enumerate(offsets)]
    await insert(store, jobs)

    rounds = [ids((await claim(store, T0 + 100, 2)).claimed) for _ in range(3)]

    by_due = ids(sorted(jobs, key=lambda job: job.due_at))
    assert rounds == [by_due[0:2], by_due[2:4], by_due[4:]]


async def test_one_point_of_priority_is_worth_six_seconds_of_waiting(store: Store) -> None:
    older = new_job(1, due_at=T0, priority=0)
    just_younger = new_job(2, due_at=T0 + PRIORITY_AGING_MS - 1, priority=1)
    too_young = new_job(3, due_at=T0 + PRIORITY_AGING_MS + 1, priority=1)
    await insert(store, [older, just_younger, too_young])

    batch = await claim(store, T0 + 10_000, 3)

    assert ids(batch.claimed) == ids([just_younger, older, too_young])


async def test_a_delayed_job_is_not_claimed_before_it_is_due_whatever_its_priority(
    store: Store,
) -> None:
    delayed = new_job(1, due_at=T0 + 1_000, priority=MAX_PRIORITY)
    waiting = new_job(2, due_at=T0, priority=MIN_PRIORITY)
    await insert(store, [delayed, waiting])

    assert ids((await claim(store, T0 + 999, 10)).claimed) == [waiting.id]
    assert ids((await claim(store, T0 + 999, 10)).claimed) == []
    assert ids((await claim(store, T0 + 1_000, 10)).claimed) == [delayed.id]


async def test_the_lowest_priority_is_claimable_the_moment_it_is_due(store: Store) -> None:
    # Its rank lies 600 s after its due time: the claim's bound on the rank must reach it.
    lowest = new_job(1, due_at=T0 + 5_000, priority=MIN_PRIORITY)
    await insert(store, [lowest, new_job(2, due_at=T0 + 5_001, priority=MIN_PRIORITY)])

    assert ids((await claim(store, T0 + 5_000, 10, source="ready")).claimed) == [lowest.id]


async def _stream(store: Store, low: NewJob, per_step: int) -> tuple[int, list[NewJob]]:
    """Every ``STEP`` from ``T0 + STEP``, ``per_step`` priority-100 jobs become due and one job
    is claimed; the step at which ``low`` is claimed, and the jobs claimed before it."""
    before: list[NewJob] = []
    pending: dict[object, NewJob] = {}
    for step in range(1, 100):
        now = T0 + step * STEP
        stream = [
            new_job(step * 10 + n, due_at=now, created_at=now, priority=MAX_PRIORITY)
            for n in range(per_step)
        ]
        await insert(store, stream)
        pending.update((job.id, job) for job in stream)
        taken = await claim_one(store, now, source="ready")  # no lease expires in between
        if taken.job_id == low.id:
            return step, before
        before.append(pending.pop(taken.job_id))
    raise AssertionError("the low-priority job starved")


async def test_a_low_priority_job_is_not_starved_by_a_steady_stream_of_high_priority_work(
    store: Store,
) -> None:
    # One job of priority 100 arrives per step and one is claimed per step. The -100 job's rank
    # is its due time + 600 s; a new job's is its due time - 600 s: the stream goes first until
    # a new job became due more than 1,200 s after the low one (1 ms after T0).
    low = new_job(0, due_at=T0 + 1, priority=MIN_PRIORITY)
    await insert(store, [low])

    step, before = await _stream(store, low, per_step=1)

    assert step == 21  # at 1,260 s: the first step after it waited 1,200 s
    assert step * STEP > SPREAD >= (step - 1) * STEP
    assert [job.due_at for job in before] == [T0 + n * STEP for n in range(1, 21)]
    assert (await status(store, low)).priority == MIN_PRIORITY


async def test_a_low_priority_job_goes_ahead_of_later_work_even_when_the_stream_outruns_the_workers(
    store: Store,
) -> None:
    # Two arrive per step, one is claimed: a backlog grows for ever. The -100 job still goes
    # ahead of every job that became due more than 1,200 s after it, once the forty that
    # became due within 1,200 s of it (steps 1 to 20) are gone.
    low = new_job(0, due_at=T0 + 1, priority=MIN_PRIORITY)
    await insert(store, [low])

    step, before = await _stream(store, low, per_step=2)

    assert step == 41
    assert len(before) == 40
    assert max(job.due_at for job in before) - low.due_at < SPREAD


async def test_retries_snoozes_and_replays_keep_the_priority(store: Store) -> None:
    urgent = new_job(1, priority=50, max_attempts=2)
    await insert(store, [urgent])
    lease = (await claim_one(store, T0)).lease
    # Due again at T0 + 10 s, it still ranks ahead of a plain job due 5 s before it.
    assert await fail(store, lease, T0 + 1_000, T0 + 10_000) == {urgent.id}
    plain = new_job(2, due_at=T0 + 5_000)
    await insert(store, [plain])

    retried = await claim_one(store, T0 + 20_000)
    assert (retried.job_id, retried.priority) == (urgent.id, 50)

    until = T0 + 30_000
    snoozed = {urgent.id}
    assert (
        await store.job_snooze_many([SnoozedAttempt(retried.lease, until)], T0 + 21_000) == snoozed
    )
    again = await claim_one(store, until)
    assert again.job_id == urgent.id  # the plain job is still behind it
    assert await fail(store, again.lease, until + 1, None) == {urgent.id}  # dead letter
    assert await store.job_replay(ref(urgent), until + 2)
    assert (await status(store, urgent)).priority == 50
    assert ids((await claim(store, until + 2, 2)).claimed) == [urgent.id, plain.id]
