"""Fair dispatch in the store: a fair queue's ready jobs are claimed round-robin across
partition keys (tenants unless jobs name another key), weighted per key, work-conserving (a key
without due work takes no turn, a lone key gets the whole batch), in the claim's usual order
within a key (priorities and their aging), and with per-key limits kept; a queue that is not
fair is claimed exactly as before. Bad settings are refused naming the field, storing nothing."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest

from caravel.errors import ValidationError
from caravel.flow import ConcurrencyLimit, RateLimit
from caravel.jobs import ClaimedJob
from caravel.limits import PRIORITY_AGING_MS
from caravel.store.protocol import NewJob, QueueLimit, ReadStore, Store
from tests.store.conformance.builders import QUEUE, T0, claim, insert, new_job


def _fair(**fields: object) -> ConcurrencyLimit:
    return ConcurrencyLimit(queue=QUEUE, fair=True, **fields)  # type: ignore[arg-type]


def _backlog(tenant: str, count: int, *, start: int, step: int = 1) -> list[NewJob]:
    """``count`` jobs of ``tenant``, due one after another from ``start``."""
    return [
        new_job(start + n, tenant=tenant, created_at=T0 + start + n * step) for n in range(count)
    ]


async def _claimed(store: Store, now: int, limit: int, *, limited: bool = True) -> list[ClaimedJob]:
    return (await claim(store, now, limit, limited=limited)).claimed


def _ids(jobs: Sequence[NewJob]) -> set[object]:
    return {job.id for job in jobs}


def _claimed_ids(claimed: Sequence[ClaimedJob]) -> set[object]:
    """Which jobs a claim took (it returns them in claim order, whichever it picked): each
    test claims batches small enough that which jobs were taken shows the order of picking."""
    return {job.job_id for job in claimed}


# ----- storing the setting --------------------------------------------------------------------


async def test_fairness_and_weights_are_stored_listed_and_replaced(
    store: Store, reader: ReadStore
) -> None:
    stored = await store.queue_limit_set(_fair(weights={"b": 3, "a": 2}), T0)
    assert stored == QueueLimit(QUEUE, None, None, T0, fair=True, weights={"a": 2, "b": 3})
    assert await reader.queue_limit_list() == [stored]
    # Set again: the whole setting is replaced, weights included.
    await store.queue_limit_set(_fair(per_key=2, weights={"c": 1}), T0 + 1)
    assert await store.queue_limit_list() == [
        QueueLimit(QUEUE, None, 2, T0 + 1, fair=True, weights={"c": 1})
    ]
    await store.queue_limit_set(ConcurrencyLimit(queue=QUEUE, concurrency=4), T0 + 2)
    assert await store.queue_limit_list() == [QueueLimit(QUEUE, 4, None, T0 + 2)]
    await store.queue_limit_set(_fair(weights={"a": 5}), T0 + 3)
    assert await store.queue_limit_clear(QUEUE, T0 + 4) is True
    assert await store.queue_limit_list() == []
    # A cleared queue's weights went with it.
    await store.queue_limit_set(_fair(), T0 + 5)
    assert await store.queue_limit_list() == [
        QueueLimit(QUEUE, None, None, T0 + 5, fair=True, weights={})
    ]


async def test_the_usage_read_shows_fairness_and_weights(store: Store, reader: ReadStore) -> None:
    await insert(store, [*_backlog("a", 3, start=0), *_backlog("b", 2, start=100)])
    await store.queue_limit_set(_fair(weights={"a": 2}), T0)
    await store.queue_limit_set(ConcurrencyLimit(queue="other", concurrency=1), T0)
    fair, plain = await reader.queue_limit_usage(None, T0 + 1_000)
    assert fair.limit == QueueLimit(QUEUE, None, None, T0, fair=True, weights={"a": 2})
    assert plain.limit == QueueLimit("other", 1, None, T0)
    # Fairness holds nothing back: with no cap, nothing waits.
    assert (fair.running, fair.waiting, fair.keys) == (0, 0, ())
    await _claimed(store, T0 + 1_001, 2)
    (fair,) = await reader.queue_limit_usage(QUEUE, T0 + 1_002)
    assert (fair.limit.weights, fair.running, fair.waiting) == ({"a": 2}, 2, 0)


def _forced(**fields: object) -> ConcurrencyLimit:
    limit = _fair(weights={"a": 2})
    for name, value in fields.items():
        object.__setattr__(limit, name, value)
    return limit


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"weights": {"a": 0}}, "weights"),
        ({"weights": {"a": 1001}}, "weights"),
        ({"weights": {"a": True}}, "weights"),
        ({"weights": {"a": "2"}}, "weights"),
        ({"weights": {"": 2}}, "weights"),
        ({"weights": {"a\x00b": 2}}, "weights"),
        ({"weights": {"k" * 129: 2}}, "weights"),
        ({"weights": {f"k{n}": 1 for n in range(1001)}}, "weights"),
        ({"weights": [("a", 2)]}, "weights"),
        ({"fair": False}, "weights"),
        ({"fair": "yes"}, "fair"),
        ({"fair": False, "weights": {}}, "concurrency"),
    ],
)
async def test_a_bad_setting_is_refused_naming_the_field_and_nothing_is_stored(
    store: Store, fields: dict[str, object], field: str
) -> None:
    await store.queue_limit_set(ConcurrencyLimit(queue=QUEUE, concurrency=7), T0)
    with pytest.raises(ValidationError) as raised:
        await store.queue_limit_set(_forced(**fields), T0 + 1)
    assert raised.value.field == field
    args = {"queue": QUEUE, "fair": True, "weights": {"a": 2}, **fields}
    with pytest.raises(ValidationError) as constructed:
        ConcurrencyLimit(**args)  # type: ignore[arg-type]
    assert constructed.value.field == field
    assert await store.queue_limit_list() == [QueueLimit(QUEUE, 7, None, T0)]


# ----- the fair claim -------------------------------------------------------------------------


async def test_keys_take_turns_in_each_round(store: Store) -> None:
    # Tenant a's backlog is older than every job of b and c.
    a = _backlog("a", 10, start=0)
    b = _backlog("b", 3, start=100)
    c = _backlog("c", 2, start=200)
    await insert(store, [*a, *b, *c])
    await store.queue_limit_set(_fair(), T0)

    claimed = await _claimed(store, T0 + 1_000, 7)
    # Round one: each key's first job, oldest head first; round two likewise; then a alone.
    assert _claimed_ids(claimed) == _ids([a[0], b[0], c[0], a[1], b[1], c[1], a[2]])
    rest = await _claimed(store, T0 + 1_001, 4)
    assert _claimed_ids(rest) == _ids([a[3], b[2], a[4], a[5]])


async def test_without_fairness_the_same_jobs_are_claimed_in_the_usual_order(
    store: Store,
) -> None:
    a = _backlog("a", 10, start=0)
    b = _backlog("b", 3, start=100)
    await insert(store, [*a, *b])
    plain = await _claimed(store, T0 + 1_000, 6, limited=False)
    assert _claimed_ids(plain) == _ids(a[:6])
    # A limits row without fairness: the same order.
    await store.queue_limit_set(ConcurrencyLimit(queue=QUEUE, concurrency=100), T0)
    limited = await _claimed(store, T0 + 1_001, 6)
    assert _claimed_ids(limited) == _ids([*a[6:], *b[:2]])


async def test_a_lone_key_gets_the_whole_batch(store: Store) -> None:
    a = _backlog("a", 20, start=0)
    await insert(store, a)
    await store.queue_limit_set(_fair(weights={"b": 5}), T0)
    assert _claimed_ids(await _claimed(store, T0 + 1_000, 8)) == _ids(a[:8])


async def test_an_idle_keys_share_goes_to_the_others(store: Store) -> None:
    a = _backlog("a", 6, start=0)
    b = _backlog("b", 6, start=100)
    later = _backlog("c", 6, start=10_000)  # not due at the claim
    await insert(store, [*a, *b, *later])
    await store.queue_limit_set(_fair(), T0)
    claimed = await _claimed(store, T0 + 1_000, 8)
    assert _claimed_ids(claimed) == _ids([a[0], b[0], a[1], b[1], a[2], b[2], a[3], b[3]])


async def test_a_weighted_key_gets_its_weight_in_each_round(store: Store) -> None:
    a = _backlog("a", 10, start=0)
    b = _backlog("b", 10, start=100)
    await insert(store, [*a, *b])
    await store.queue_limit_set(_fair(weights={"b": 3}), T0)
    assert _claimed_ids(await _claimed(store, T0 + 1_000, 4)) == _ids([a[0], *b[:3]])
    claimed = await _claimed(store, T0 + 1_001, 5)
    assert _claimed_ids(claimed) == _ids([a[1], *b[3:6], a[2]])


async def test_priorities_order_jobs_within_a_key(store: Store) -> None:
    low = new_job(1, tenant="a", created_at=T0)
    high = new_job(2, tenant="a", created_at=T0 + 10, priority=5)
    b = _backlog("b", 2, start=50)
    await insert(store, [low, high, *b])
    await store.queue_limit_set(_fair(), T0)
    # a's head is its high-priority job: round one is it and b's first.
    assert _claimed_ids(await _claimed(store, T0 + 1_000, 2)) == _ids([high, b[0]])
    # Round two: a's low one, due before b's second.
    assert _claimed_ids(await _claimed(store, T0 + 1_001, 1)) == _ids([low])


async def test_aging_still_brings_an_old_low_priority_job_first_within_its_key(
    store: Store,
) -> None:
    old = new_job(1, tenant="a", created_at=T0)
    # Priority 1 but due more than one aging step after the old job: the old one ranks first.
    newer = new_job(2, tenant="a", created_at=T0 + PRIORITY_AGING_MS + 1, priority=1)
    await insert(store, [old, newer])
    await store.queue_limit_set(_fair(), T0)
    claimed = await _claimed(store, T0 + 2 * PRIORITY_AGING_MS, 1)
    assert _claimed_ids(claimed) == _ids([old])


async def test_partition_keys_take_turns_across_tenants(store: Store) -> None:
    shared = [new_job(n, tenant=f"t{n}", partition_key="big", created_at=T0 + n) for n in range(5)]
    other = new_job(9, tenant="t9", created_at=T0 + 50)
    await insert(store, [*shared, other])
    await store.queue_limit_set(_fair(), T0)
    claimed = await _claimed(store, T0 + 1_000, 3)
    assert _claimed_ids(claimed) == _ids([shared[0], other, shared[1]])


async def test_a_key_with_jobs_running_goes_behind_a_key_with_none(store: Store) -> None:
    a = _backlog("a", 10, start=0)
    await insert(store, a)
    await store.queue_limit_set(_fair(), T0)
    (running,) = await _claimed(store, T0 + 1_000, 1)
    assert running.job_id == a[0].id
    b = _backlog("b", 3, start=2_000)  # enqueued after every job of a
    await insert(store, b)
    # a has one job running and nine ready, b none running: a claim of one takes b's.
    (taken,) = await _claimed(store, T0 + 3_000, 1)
    assert taken.job_id == b[0].id
    # Now each has one running: a's older job goes first, and so on, turn by turn.
    taken_in_turn = [(await _claimed(store, T0 + 3_001 + n, 1))[0].job_id for n in range(4)]
    assert taken_in_turn == [a[1].id, b[1].id, a[2].id, b[2].id]


async def test_running_jobs_fill_a_weighted_keys_round_first(store: Store) -> None:
    a = _backlog("a", 10, start=0)
    b = _backlog("b", 10, start=100)
    await insert(store, [*a, *b])
    await store.queue_limit_set(_fair(weights={"a": 2}), T0)
    # a's first two run: with a weight of two its round is full, so a claim of one takes b's.
    started = await _claimed(store, T0 + 1_000, 2)
    assert _claimed_ids(started) == _ids(a[:2])
    (taken,) = await _claimed(store, T0 + 1_001, 1)
    assert taken.job_id == b[0].id
    # One of a's finishes: one running of two, so a's next job is in round 0 again, before
    # b's second (round 1).
    await store.job_complete_many([started[0].lease], T0 + 1_002)
    (taken,) = await _claimed(store, T0 + 1_003, 1)
    assert taken.job_id == a[2].id


async def test_an_expired_lease_no_longer_counts_into_its_keys_round(store: Store) -> None:
    b = _backlog("b", 5, start=0)
    await insert(store, b)
    await store.queue_limit_set(_fair(), T0)
    (running,) = await _claimed(store, T0 + 1_000, 1)
    a = _backlog("a", 2, start=2_000)
    await insert(store, a)
    (done,) = await _claimed(store, T0 + 3_000, 1)
    assert done.job_id == a[0].id  # b has a job running, a none
    await store.job_complete_many([done.lease], T0 + 3_001)
    # After b's lease expired (ready source only: the expired job stays where it is), b counts
    # none running: both keys are in round 0, and b's turn comes after a (served last). Were
    # the expired lease counted, b would be in round 1, behind a.
    after = running.lease.expires_at_ms + 1
    (taken,) = (await claim(store, after, 1, limited=True, source="ready")).claimed
    assert taken.job_id == b[1].id


async def test_a_claim_reads_a_share_of_each_key_and_the_next_claim_goes_on(
    store: Store,
) -> None:
    """A fair claim reads at most twice its even share of the batch from each key: with one big
    key and nine keys of one job, a claim of 20 reads 4 of the big key's (20 over 10 keys, twice)
    and takes 13; the next claim takes the big key's next ones."""
    big = _backlog("a", 50, start=0)
    small = [new_job(100 + n, tenant=f"k{n}", created_at=T0 + 100 + n) for n in range(9)]
    await insert(store, [*big, *small])
    await store.queue_limit_set(_fair(), T0)
    first = await _claimed(store, T0 + 1_000, 20)
    assert _claimed_ids(first) == _ids([*big[:4], *small])
    assert _claimed_ids(await _claimed(store, T0 + 1_001, 20)) == _ids(big[4:24])


async def test_one_job_at_a_time_goes_round_every_key(store: Store) -> None:
    """A worker of one slot never has a job running when it claims: the cursor, not the
    running counts, makes the keys take turns, however old one key's backlog is."""
    big = _backlog("a", 20, start=0)
    small = [*_backlog("b", 3, start=5_000), *_backlog("c", 3, start=6_000)]
    await insert(store, [*big, *small])
    await store.queue_limit_set(_fair(), T0)
    order = []
    for n in range(9):
        (job,) = await _claimed(store, T0 + 10_000 + n, 1)
        await store.job_complete_many([job.lease], T0 + 10_000 + n)
        order.append(job.job_id)
    expected = [big[0], small[0], small[3], big[1], small[1], small[4], big[2], small[2], small[5]]
    assert order == [job.id for job in expected]
    # With the small keys done, the big one gets every claim.
    rest = [(await _claimed(store, T0 + 11_000 + n, 1))[0].job_id for n in range(2)]
    assert rest == [job.id for job in big[3:5]]


async def test_a_fair_claim_keeps_the_per_key_limit(store: Store) -> None:
    a = _backlog("a", 6, start=0)
    b = _backlog("b", 6, start=100)
    await insert(store, [*a, *b])
    await store.queue_limit_set(_fair(per_key=2), T0)
    first = await _claimed(store, T0 + 1_000, 10)
    assert _claimed_ids(first) == _ids([a[0], b[0], a[1], b[1]])
    assert await _claimed(store, T0 + 1_001, 10) == []
    await store.job_complete_many([first[0].lease], T0 + 1_002)
    assert _claimed_ids(await _claimed(store, T0 + 1_003, 10)) == _ids([a[2]])


async def test_a_fair_claim_takes_expired_leases_first(store: Store) -> None:
    a = _backlog("a", 3, start=0)
    b = _backlog("b", 3, start=100)
    await insert(store, [*a, *b])
    await store.queue_limit_set(_fair(), T0)
    (taken,) = await _claimed(store, T0 + 1_000, 1)
    assert taken.job_id == a[0].id
    # Its lease expires; the next claim takes it over first, then the keys take turns, b's
    # first (a was served last).
    claimed = await _claimed(store, taken.lease.expires_at_ms + 1, 3)
    assert _claimed_ids(claimed) == _ids([a[0], b[0], a[1]])


# ----- fairness beside a rate -----------------------------------------------------------------


async def test_fairness_is_of_the_concurrency_kind_and_a_rate_keeps_it(store: Store) -> None:
    rate = RateLimit(queue=QUEUE, rate=10, period=timedelta(seconds=60))
    await store.queue_limit_set(_fair(weights={"a": 2}), T0)
    both = await store.queue_limit_set(rate, T0 + 1)
    assert both == QueueLimit(QUEUE, None, None, T0 + 1, 10, None, 60_000, True, {"a": 2})
    assert await store.queue_limit_list() == [both]
    assert await store.queue_limit_clear(QUEUE, T0 + 2, "rate") is True
    assert await store.queue_limit_list() == [
        QueueLimit(QUEUE, None, None, T0 + 2, fair=True, weights={"a": 2})
    ]
    await store.queue_limit_set(rate, T0 + 3)
    # Clearing the concurrency kind takes the fairness and its weights; the rate stays.
    assert await store.queue_limit_clear(QUEUE, T0 + 4, "concurrency") is True
    assert await store.queue_limit_list() == [
        QueueLimit(QUEUE, None, None, T0 + 4, 10, None, 60_000)
    ]
    assert await store.queue_limit_clear(QUEUE, T0 + 5, "concurrency") is False
    # Fairness set again starts without the old weights.
    await store.queue_limit_set(_fair(), T0 + 6)
    (stored,) = await store.queue_limit_list()
    assert (stored.fair, stored.weights, stored.rate) == (True, {}, 10)


async def test_a_fair_queue_with_a_rate_claims_in_rounds_within_the_rate(store: Store) -> None:
    # Tenant a's backlog is older than every job of b.
    a = _backlog("a", 10, start=0)
    b = _backlog("b", 3, start=100)
    await insert(store, [*a, *b])
    await store.queue_limit_set(_fair(), T0)
    await store.queue_limit_set(RateLimit(queue=QUEUE, rate=4, period=timedelta(seconds=60)), T0)

    claimed = await _claimed(store, T0 + 1_000, 10)
    # The rate allows four starts: two rounds of a and b, not a's four oldest.
    assert _claimed_ids(claimed) == _ids([a[0], b[0], a[1], b[1]])
    assert await _claimed(store, T0 + 1_001, 10) == []
