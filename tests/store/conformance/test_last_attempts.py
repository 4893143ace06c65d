"""A listing with each job's latest attempt record (``job_list_with_last_attempt``): the same
jobs, in the same order and page, as ``job_list``; each with the record of its newest claim (not
its highest attempt number, which a snooze repeats), or ``None`` when it keeps no record. The
read-only store offers it too.
"""

from __future__ import annotations

from caravel.attempts import AttemptOutcome
from caravel.jobs import JobState
from caravel.store.protocol import (
    FailedAttempt,
    JobFilter,
    ReadStore,
    Recorder,
    SnoozedAttempt,
    Store,
)
from tests.store.conformance.builders import T0, claim_one, ids, insert, new_job, ref

BY = Recorder(None, "host-a.example", 4_001, 20)


async def _fail(store: Store, now: int, *, retry_at: int | None, detail: str) -> None:
    """Claim the one due job at ``now`` and fail it with ``detail``."""
    lease = (await claim_one(store, now)).lease
    failure = FailedAttempt(lease, "HandlerFailed", retry_at, f"app.E{lease.token}", detail)
    assert await store.job_fail_many([failure], now + 5, recorder=BY) == {lease.job_id}


async def test_each_job_comes_with_its_newest_record(store: Store, reader: ReadStore) -> None:
    dead = new_job(0, created_at=T0, max_attempts=2)
    await insert(store, [dead])
    await _fail(store, T0 + 10, retry_at=T0 + 20, detail="first try")
    await _fail(store, T0 + 30, retry_at=None, detail="second <try>")
    fresh = new_job(1, created_at=T0 + 1)
    await insert(store, [fresh])

    for source in (store, reader):
        listed = await source.job_list_with_last_attempt(JobFilter(limit=10))
        assert [status.job_id for status, _ in listed] == ids([fresh, dead])
        (_, none), (status, last) = listed
        assert none is None
        assert status.state is JobState.DEAD_LETTER
        assert last is not None
        assert (last.attempt, last.outcome, last.detail) == (
            2,
            AttemptOutcome.FAILED,
            "second <try>",
        )
        assert (last.category, last.host, last.pid) == ("HandlerFailed", BY.host, BY.pid)
        assert last.error_class == f"app.E{last.lease_token}"
        assert last.retry_at is None
        # The plain listing's statuses, field for field.
        assert [s for s, _ in listed] == await source.job_list(JobFilter(limit=10))


async def test_the_newest_claim_wins_over_a_repeated_attempt_number(store: Store) -> None:
    job = new_job(0, max_attempts=3)
    await insert(store, [job])
    await _fail(store, T0, retry_at=T0 + 10, detail="failed")
    snoozing = (await claim_one(store, T0 + 20)).lease
    snooze = SnoozedAttempt(snoozing, T0 + 30)
    assert await store.job_snooze_many([snooze], T0 + 25, recorder=BY) == {job.id}
    again = (await claim_one(store, T0 + 40)).lease
    assert again.attempt == snoozing.attempt  # the snooze gave its attempt number back
    await store.job_complete_many([again], T0 + 45, recorder=BY)

    [(status, last)] = await store.job_list_with_last_attempt(JobFilter(limit=5))
    history = await store.job_attempts(ref(job))
    assert history is not None
    assert last == history[-1]
    assert (last.outcome, last.lease_token) == (AttemptOutcome.COMPLETED, again.token)
    assert status.state is JobState.COMPLETED


async def test_filters_order_and_paging_are_the_listings(store: Store) -> None:
    jobs = [new_job(n, created_at=T0 + n, max_attempts=1) for n in range(4)]
    await insert(store, jobs)
    for n in range(3):  # the first three become dead letters, oldest claimed first
        await _fail(store, T0 + 100 + n * 10, retry_at=None, detail=f"job {n}")

    # Dead letters 2, 1, 0 newest first (0, 1, 2 oldest first); the page skips one, takes two.
    for oldest_first, expected in ((False, [1, 0]), (True, [1, 2])):
        where = JobFilter(state=JobState.DEAD_LETTER, limit=2, offset=1, oldest_first=oldest_first)
        listed = await store.job_list_with_last_attempt(where)
        assert [s.job_id for s, _ in listed] == [s.job_id for s in await store.job_list(where)]
        assert [s.job_id for s, _ in listed] == [jobs[n].id for n in expected]
        assert [last.detail if last else None for _, last in listed] == [
            f"job {n}" for n in expected
        ]
