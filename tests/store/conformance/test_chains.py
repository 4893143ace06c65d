"""Chains: ``chain_insert`` saves every step at once, the later ones held (never claimed, however
late the clock), and the database releases the next step, with the step's stored result, in the
transaction that completes it. A step that fails for good or is cancelled stops the chain there;
replaying it resumes the chain."""

from __future__ import annotations

import json

import pytest

from caravel.clock import from_ms
from caravel.errors import IdempotencyConflictError
from caravel.jobs import CancelOutcome, JobState
from caravel.limits import HELD_DUE_AT
from caravel.store.protocol import JobRef, NewJob, Store
from caravel.store.pruning import PruneRequest
from tests.store.conformance.builders import (
    QUEUE,
    T0,
    chain,
    claim,
    claim_one,
    everything,
    fail,
    ids,
    insert,
    new_job,
    payload,
    ref,
    status,
)

#: Far past any real claim's horizon, still before a held step's due time.
FAR = HELD_DUE_AT - 1


def steps(count: int, **fields: object) -> list[NewJob]:
    return [new_job(n, **fields) for n in range(count)]  # type: ignore[arg-type]


async def complete(store: Store, job: NewJob, now: int, result: str | None) -> None:
    """Claim ``job`` (the only one claimable at ``now``) and complete it with ``result``."""
    claimed = await claim_one(store, now)
    assert claimed.job_id == job.id
    results = None if result is None else {job.id: result}
    assert await store.job_complete_many([claimed.lease], now, results=results) == {job.id}


async def nothing_ready(store: Store) -> bool:
    """Whether no waiting job is claimable even at :data:`FAR` (a running job's lease has run
    out by then: its takeover is not what these tests look at)."""
    return (await claim(store, FAR, 10, source="ready")).claimed == []


async def assert_held(store: Store, job: NewJob) -> None:
    got = await status(store, job)
    assert got.state is JobState.READY, got
    assert got.held, got
    assert got.due_at == from_ms(HELD_DUE_AT)


async def test_later_steps_are_held_until_the_step_before_completes(store: Store) -> None:
    first, second, third = steps(3)
    made = [first, second, third]
    assert await store.chain_insert(chain(made)) == (ids(made), True)

    await assert_held(store, second)
    await assert_held(store, third)
    running = await claim_one(store, T0)
    assert running.job_id == first.id
    # Nothing else is claimable, however far the clock has gone, while the first runs.
    assert await nothing_ready(store)

    assert await store.job_complete_many(
        [running.lease], T0 + 50, results={first.id: payload(total=7)}
    ) == {first.id}

    got = await status(store, second)
    assert (got.state, got.held, got.due_at) == (JobState.READY, False, from_ms(T0 + 50))
    await assert_held(store, third)
    released = await claim_one(store, T0 + 50)
    assert released.job_id == second.id
    assert json.loads(released.upstream or "") == {"result": {"total": 7}}
    assert await nothing_ready(store)  # the third still waits


async def test_a_step_without_a_result_hands_null(store: Store) -> None:
    first, second = steps(2)
    await store.chain_insert(chain([first, second]))
    await complete(store, first, T0 + 10, None)

    released = await claim_one(store, T0 + 10)
    assert released.job_id == second.id
    assert json.loads(released.upstream or "") == {"result": None}


async def test_the_first_step_is_handed_nothing(store: Store) -> None:
    first, second = steps(2)
    await store.chain_insert(chain([first, second]))
    assert (await claim_one(store, T0)).upstream is None


async def test_a_failure_with_retries_left_releases_nothing(store: Store) -> None:
    first, second = steps(2, max_attempts=3)
    await store.chain_insert(chain([first, second]))
    lease = (await claim_one(store, T0)).lease
    assert await fail(store, lease, T0 + 10, T0 + 1_000) == {first.id}

    await assert_held(store, second)
    retried = await claim_one(store, FAR)
    assert retried.job_id == first.id  # the retry, not the held step
    assert await nothing_ready(store)


async def test_a_dead_lettered_step_stops_the_chain_and_a_replay_resumes_it(store: Store) -> None:
    first, second, third = steps(3, max_attempts=1)
    await store.chain_insert(chain([first, second, third]))
    await complete(store, first, T0 + 10, payload(step=0))
    lease = (await claim_one(store, T0 + 10)).lease
    assert await fail(store, lease, T0 + 20, None) == {second.id}

    assert (await status(store, second)).state is JobState.DEAD_LETTER
    await assert_held(store, third)
    assert await nothing_ready(store)

    assert await store.job_replay(ref(second), T0 + 30) is True
    await assert_held(store, third)  # a replay is not a completion
    await complete(store, second, T0 + 40, payload(step=1))

    released = await claim_one(store, T0 + 40)
    assert released.job_id == third.id
    assert json.loads(released.upstream or "") == {"result": {"step": 1}}


async def test_a_step_dead_lettered_by_an_expired_lease_stops_the_chain(store: Store) -> None:
    first, second = steps(2, max_attempts=1)
    await store.chain_insert(chain([first, second]))
    await claim_one(store, T0, lease_ms=1_000)
    assert (await claim(store, T0 + 1_000)).dead_lettered == 1

    assert (await status(store, first)).state is JobState.DEAD_LETTER
    await assert_held(store, second)


@pytest.mark.parametrize("when", ["waiting", "running"])
async def test_a_cancelled_step_ends_the_chain_and_cancels_its_held_steps(
    store: Store, when: str
) -> None:
    first, second, third = steps(3)
    await store.chain_insert(chain([first, second, third]))
    lease = None
    if when == "running":
        lease = (await claim_one(store, T0)).lease
    assert await store.job_cancel(ref(first), T0 + 10) in (
        CancelOutcome.CANCELLED,
        CancelOutcome.CANCELLED_RUNNING,
    )
    if lease is not None:  # the fenced worker's acknowledgement changes nothing
        assert await store.job_complete_many([lease], T0 + 20) == set()

    assert (await status(store, first)).state is JobState.CANCELLED
    # In the cancel's own statement: every later step, cancelled at the cancel's time.
    for later in (second, third):
        got = await status(store, later)
        assert got.state is JobState.CANCELLED
        assert got.finished_at == from_ms(T0 + 10)
        assert not got.held
    assert await nothing_ready(store)


async def test_a_cancelled_held_step_is_never_released_nor_are_those_after_it(
    store: Store,
) -> None:
    first, second, third = steps(3)
    await store.chain_insert(chain([first, second, third]))
    assert await store.job_cancel(ref(second), T0 + 5) is CancelOutcome.CANCELLED
    got = await status(store, third)
    assert (got.state, got.finished_at) == (JobState.CANCELLED, from_ms(T0 + 5))

    await complete(store, first, T0 + 10, payload(step=0))

    got = await status(store, second)
    assert (got.state, got.due_at) == (JobState.CANCELLED, from_ms(HELD_DUE_AT))
    assert (await status(store, third)).state is JobState.CANCELLED
    assert await nothing_ready(store)


async def test_a_dead_letter_a_held_step_waits_for_is_kept_from_prune_and_delete(
    store: Store,
) -> None:
    first, second = steps(2, max_attempts=1)
    lone = new_job(7, max_attempts=1)
    await store.chain_insert(chain([first, second]))
    await insert(store, [lone])
    for _ in (first, lone):
        claimed = await claim_one(store, T0)
        await fail(store, claimed.lease, T0 + 1, None)
    much_later = T0 + 10 * 86_400_000

    # Its replay is how the chain resumes: retention and deletes leave it.
    assert not await store.job_delete(ref(first))
    pruned = await store.job_prune(
        PruneRequest(now=much_later, limit=100, dead_letter_before=much_later)
    )
    assert pruned.deleted == 1  # the lone dead letter only
    assert (await status(store, first)).state is JobState.DEAD_LETTER
    await assert_held(store, second)

    # Giving the chain up (cancelling its held step) frees it.
    assert await store.job_cancel(ref(second), much_later) is CancelOutcome.CANCELLED
    assert await store.job_delete(ref(first))


async def test_chain_steps_lists_the_steps_in_order_for_their_tenant(store: Store) -> None:
    made = steps(4, created_at=T0)
    # Ids out of order with the steps: the listing follows the steps.
    made = [made[2], made[0], made[3], made[1]]
    await store.chain_insert(chain(made))
    other = new_job(9, tenant="tenant-b")
    await store.chain_insert(chain([other]))

    got = await store.chain_steps(made[0].id, "tenant-a")
    assert ids(got) == ids(made)
    assert [step.chain_step for step in got] == [0, 1, 2, 3]
    assert {step.chain_id for step in got} == {made[0].id}
    assert [step.held for step in got] == [False, True, True, True]
    assert ids(await store.chain_steps(made[0].id, None)) == ids(made)
    assert await store.chain_steps(made[0].id, "tenant-b") == []
    assert await store.chain_steps(made[1].id, "tenant-a") == []  # not a chain's id
    assert ids(await store.chain_steps(other.id, "tenant-b")) == [other.id]


async def test_a_keyed_chain_enqueued_again_returns_the_same_ids(store: Store) -> None:
    made = [new_job(0, key="order-1"), *steps(2)]
    assert await store.chain_insert(chain(made)) == (ids(made), True)

    again = [new_job(0, key="order-1", created_at=T0 + 5), *steps(2, created_at=T0 + 5)]
    assert await store.chain_insert(chain(again)) == (ids(made), False)
    assert sorted(ids(await everything(store))) == sorted(ids(made))


async def test_a_keyed_chain_with_other_content_conflicts_and_inserts_nothing(
    store: Store,
) -> None:
    made = [new_job(0, key="order-1"), *steps(2)]
    await store.chain_insert(chain(made))

    other = [new_job(1, key="order-1", created_at=T0 + 5), *steps(2, created_at=T0 + 5)]
    with pytest.raises(IdempotencyConflictError) as raised:
        await store.chain_insert(chain(other))

    assert raised.value.job_id == made[0].id
    assert sorted(ids(await everything(store))) == sorted(ids(made))
    for job in other[1:]:
        assert await store.job_get(JobRef(job.id, QUEUE, job.tenant_id)) is None


async def test_a_chain_under_the_key_of_a_plain_job_conflicts_and_inserts_nothing(
    store: Store,
) -> None:
    plain = new_job(0, key="order-1")
    await insert(store, [plain])

    # Same type and payload under the key, but that job is no chain's first step.
    made = [new_job(0, key="order-1", created_at=T0 + 5), *steps(2, created_at=T0 + 5)]
    with pytest.raises(IdempotencyConflictError) as raised:
        await store.chain_insert(chain(made))

    assert raised.value.job_id == plain.id
    assert ids(await everything(store)) == [plain.id]


async def test_held_steps_are_counted_and_listed_as_held_never_as_delayed(store: Store) -> None:
    first, second, third = steps(3)
    await store.chain_insert(chain([first, second, third]))
    later = new_job(9, due_at=T0 + 60_000)  # delayed, beside the held steps
    await insert(store, [later])

    (counts,) = await store.queue_counts(QUEUE, T0)
    assert (counts.ready, counts.delayed, counts.held) == (1, 1, 2)
    assert {j.job_id for j in await everything(store, shown="held", now=T0)} == {
        second.id,
        third.id,
    }
    assert {j.job_id for j in await everything(store, shown="delayed", now=T0)} == {later.id}
    # At any moment before the end of time: the held ones stay held.
    (counts,) = await store.queue_counts(QUEUE, FAR)
    assert (counts.ready, counts.delayed, counts.held) == (2, 0, 2)
