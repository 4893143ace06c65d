""" "One pending per key": at most one ready job per queue, tenant and pending key. A second
insert under the key returns the pending job (keep) or gives it its content (replace, its due
time capped at its creation plus the debounce); a claimed job frees the key; a job made ready
again while another is pending under its key gives its key up. Every insert strategy a store
may pick by size settles keyed jobs one by one, in order."""

from __future__ import annotations

import pytest

from caravel.errors import PendingKeyConflictError
from caravel.jobs import JobState
from caravel.store.protocol import JobRef, NewJob, SnoozedAttempt, Store
from tests.store.conformance.builders import (
    T0,
    claim,
    claim_one,
    everything,
    fail,
    insert,
    many,
    new_job,
    payload,
    ref,
    status,
)

KEY = "user:42:reindex"


def keyed(job: NewJob, key: str = KEY, *, debounce_ms: int | None = None) -> NewJob:
    """``job`` under the pending key ``key``; with ``debounce_ms`` it replaces a pending job."""
    return job._replace(pending_key=key, debounce_ms=debounce_ms)


async def payload_of(store: Store, job_id: object, job: NewJob) -> str | None:
    return await store.job_get_payload(JobRef(job_id, job.queue, job.tenant_id))  # type: ignore[arg-type]


async def test_keep_returns_the_pending_job_and_changes_nothing(store: Store) -> None:
    first = keyed(new_job(1))
    second = keyed(new_job(2, created_at=T0 + 10, due_at=T0 + 99))
    (made,) = (await insert(store, [first])).outcomes
    (kept,) = (await insert(store, [second])).outcomes
    assert made.inserted
    assert not made.replaced
    assert (kept.job_id, kept.inserted, kept.replaced) == (first.id, False, False)
    found = await status(store, first)
    assert found.pending_key == KEY
    assert int(found.due_at.timestamp() * 1000) == T0  # not the second call's due time
    assert await payload_of(store, first.id, first) == payload(n=1)
    assert [s.job_id for s in await everything(store)] == [first.id]


async def test_replace_gives_the_pending_job_the_new_content_and_due_time(store: Store) -> None:
    first = keyed(new_job(1, due_at=T0 + 500, trace_context="00-a"), debounce_ms=60_000)
    later = keyed(
        new_job(2, created_at=T0 + 100, due_at=T0 + 2_000, trace_context="00-b"),
        debounce_ms=60_000,
    )
    await insert(store, [first])
    (replaced,) = (await insert(store, [later])).outcomes
    assert (replaced.job_id, replaced.inserted, replaced.replaced) == (first.id, False, True)
    assert await payload_of(store, first.id, first) == payload(n=2)
    found = await status(store, first)
    assert int(found.due_at.timestamp() * 1000) == T0 + 2_000
    assert int(found.updated_at.timestamp() * 1000) == T0 + 100
    # Claimed at its new due time, carrying the new trace context.
    assert not (await claim(store, T0 + 1_999)).claimed
    job = await claim_one(store, T0 + 2_000)
    assert (job.job_id, job.trace_context, job.payload) == (first.id, "00-b", payload(n=2))


async def test_a_stream_of_replacements_still_runs_by_the_debounce_limit(store: Store) -> None:
    first = keyed(new_job(0, due_at=T0 + 1_000), debounce_ms=5_000)
    await insert(store, [first])
    for n in range(1, 10):  # one call a second, each pushing the job a second further
        at = T0 + n * 1_000
        call = keyed(new_job(n, created_at=at, due_at=at + 1_000), debounce_ms=5_000)
        (outcome,) = (await insert(store, [call])).outcomes
        assert outcome.job_id == first.id
    found = await status(store, first)
    assert int(found.due_at.timestamp() * 1000) == T0 + 5_000  # created + max debounce
    job = await claim_one(store, T0 + 10_000)
    assert job.payload == payload(n=9)


async def test_replace_may_bring_the_due_time_forward(store: Store) -> None:
    first = keyed(new_job(1, due_at=T0 + 9_000), debounce_ms=60_000)
    await insert(store, [first])
    await insert(store, [keyed(new_job(2, created_at=T0 + 10), debounce_ms=60_000)])
    assert (await claim_one(store, T0 + 10)).job_id == first.id


@pytest.mark.parametrize("debounce_ms", [None, 60_000])
async def test_a_pending_job_of_another_type_is_a_conflict(
    store: Store, debounce_ms: int | None
) -> None:
    first = keyed(new_job(1))
    await insert(store, [first])
    other = keyed(new_job(2, job_type="tests.other.v1", created_at=T0 + 5), debounce_ms=debounce_ms)
    with pytest.raises(PendingKeyConflictError) as raised:
        await insert(store, [other])
    assert raised.value.job_id == first.id
    assert "pending_key" in str(raised.value)
    assert raised.value.queue == first.queue
    assert f"queue {first.queue} " in str(raised.value)
    assert KEY not in str(raised.value)
    assert await payload_of(store, first.id, first) == payload(n=1)
    assert [s.job_id for s in await everything(store)] == [first.id]


async def test_a_conflict_rolls_the_whole_call_back(store: Store) -> None:
    first = keyed(new_job(1), debounce_ms=60_000)
    await insert(store, [first])
    batch = [
        new_job(10, key="plain-10"),
        keyed(new_job(2, created_at=T0 + 5), debounce_ms=60_000),  # would replace
        keyed(new_job(3, job_type="tests.other.v1", created_at=T0 + 5)),
    ]
    with pytest.raises(PendingKeyConflictError):
        await insert(store, batch)
    assert await payload_of(store, first.id, first) == payload(n=1)
    assert [s.job_id for s in await everything(store)] == [first.id]


async def test_a_claimed_job_frees_the_key(store: Store) -> None:
    first = keyed(new_job(1))
    await insert(store, [first])
    assert (await claim_one(store, T0)).job_id == first.id
    second = keyed(new_job(2, created_at=T0 + 1))
    (outcome,) = (await insert(store, [second])).outcomes
    assert outcome.inserted
    assert outcome.job_id == second.id
    third = keyed(new_job(3, created_at=T0 + 2), debounce_ms=1_000)
    (outcome,) = (await insert(store, [third])).outcomes
    assert (outcome.job_id, outcome.replaced) == (second.id, True)


async def test_the_key_is_per_queue_and_tenant(store: Store) -> None:
    jobs = [
        keyed(new_job(1)),
        keyed(new_job(2, tenant="tenant-b")),
        keyed(new_job(3, queue="other")),
        keyed(new_job(4), key="another-key"),
    ]
    result = await insert(store, jobs)
    assert all(o.inserted for o in result.outcomes)


# Crossing every insert strategy a store may pick by size (see test_insert.py), with plain
# jobs around the keyed ones.
@pytest.mark.parametrize("plain", [0, 1, 30])
@pytest.mark.parametrize("debounce_ms", [None, 60_000])
async def test_a_key_twice_in_one_call_behaves_as_two_calls(
    store: Store, plain: int, debounce_ms: int | None
) -> None:
    others = many(plain, keyed=plain % 2 == 1, start=100)
    first = keyed(new_job(1), debounce_ms=debounce_ms)
    second = keyed(new_job(2), debounce_ms=debounce_ms)
    apart = keyed(new_job(3), key="apart", debounce_ms=debounce_ms)
    jobs = [*others[: plain // 2], first, apart, *others[plain // 2 :], second]
    result = await insert(store, jobs, chunk=7)
    outcomes = dict(zip((j.id for j in jobs), result.outcomes, strict=True))
    assert outcomes[first.id].inserted
    assert outcomes[apart.id].inserted
    assert outcomes[second.id].job_id == first.id
    assert not outcomes[second.id].inserted
    assert outcomes[second.id].replaced == (debounce_ms is not None)
    assert all(outcomes[j.id].inserted for j in others)
    expected = payload(n=2) if debounce_ms is not None else payload(n=1)
    assert await payload_of(store, first.id, first) == expected
    assert len(await everything(store)) == plain + 2


async def test_the_same_batch_again_is_settled_against_the_pending_jobs(store: Store) -> None:
    jobs = [keyed(new_job(n), key=f"key-{n}") for n in range(20)]
    await insert(store, jobs)
    again = [keyed(new_job(n, created_at=T0 + 1), key=f"key-{n}") for n in range(20)]
    result = await insert(store, again)
    assert [o.job_id for o in result.outcomes] == [j.id for j in jobs]
    assert not any(o.inserted for o in result.outcomes)


async def test_a_batch_that_collides_and_carries_pending_keys(store: Store) -> None:
    # Its first job's idempotency key is taken (PostgreSQL's COPY then goes to the path that
    # skips rows), and a later chunk carries pending keys (which that path cannot settle).
    seen = new_job(0, key="k-0")
    await insert(store, [seen])
    pending = keyed(new_job(50))
    await insert(store, [pending])
    batch = [seen, *many(20, keyed=False, start=1), keyed(new_job(60, created_at=T0 + 1))]
    result = await insert(store, batch, chunk=5)
    assert result.outcomes[0].job_id == seen.id
    assert not result.outcomes[0].inserted
    assert all(o.inserted for o in result.outcomes[1:-1])
    assert result.outcomes[-1].job_id == pending.id
    assert len(await everything(store)) == 22


async def test_a_retry_while_another_job_is_pending_gives_up_its_key(store: Store) -> None:
    first = keyed(new_job(1))
    await insert(store, [first])
    lease = (await claim_one(store, T0)).lease
    second = keyed(new_job(2, created_at=T0 + 1))
    await insert(store, [second])  # the key is free again: a new pending job
    assert await fail(store, lease, T0 + 2, retry_at=T0 + 100) == {first.id}
    retried, pending = await status(store, first), await status(store, second)
    assert retried.state == JobState.READY
    assert retried.pending_key is None
    assert pending.pending_key == KEY
    # Both run: nothing accepted is lost.
    assert {job.job_id for job in (await claim(store, T0 + 100)).claimed} == {first.id, second.id}


async def test_a_retry_keeps_its_key_when_no_other_job_holds_it(store: Store) -> None:
    first = keyed(new_job(1))
    await insert(store, [first])
    lease = (await claim_one(store, T0)).lease
    await fail(store, lease, T0 + 2, retry_at=T0 + 100)
    assert (await status(store, first)).pending_key == KEY
    (outcome,) = (await insert(store, [keyed(new_job(2, created_at=T0 + 3))])).outcomes
    assert outcome.job_id == first.id  # the retrying job is the pending one


async def test_a_snooze_while_another_job_is_pending_gives_up_its_key(store: Store) -> None:
    first = keyed(new_job(1))
    await insert(store, [first])
    lease = (await claim_one(store, T0)).lease
    second = keyed(new_job(2, created_at=T0 + 1))
    await insert(store, [second])
    snoozed = await store.job_snooze_many([SnoozedAttempt(lease, T0 + 50)], T0 + 2)
    assert snoozed == {first.id}
    assert (await status(store, first)).pending_key is None
    assert (await status(store, second)).pending_key == KEY


async def test_a_replay_while_another_job_is_pending_gives_up_its_key(store: Store) -> None:
    first = keyed(new_job(1, max_attempts=1))
    await insert(store, [first])
    lease = (await claim_one(store, T0)).lease
    await fail(store, lease, T0 + 1, retry_at=None)  # a dead letter, key kept
    assert (await status(store, first)).pending_key == KEY
    second = keyed(new_job(2, created_at=T0 + 2))
    assert (await insert(store, [second])).outcomes[0].inserted
    assert await store.job_replay(ref(first), T0 + 3)
    replayed = await status(store, first)
    assert replayed.state == JobState.READY
    assert replayed.pending_key is None
    assert (await status(store, second)).pending_key == KEY


async def test_a_replay_with_the_key_free_keeps_it(store: Store) -> None:
    first = keyed(new_job(1, max_attempts=1))
    await insert(store, [first])
    lease = (await claim_one(store, T0)).lease
    await fail(store, lease, T0 + 1, retry_at=None)
    assert await store.job_replay(ref(first), T0 + 3)
    assert (await status(store, first)).pending_key == KEY
