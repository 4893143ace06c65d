"""Rate limits through ``queue_limit_set``, ``queue_limit_clear`` and the limited claim: a rate
is stored beside the queue's concurrency caps and replaced, cleared and listed by kind; bad input
is refused naming the field with nothing stored; the weights a queue (and each partition key)
starts within any window of the period never exceed the rate, at a period's boundary as
anywhere else, however many claims run at once; a cleared rate frees the queue at once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

import pytest

from caravel.errors import ValidationError
from caravel.flow import ConcurrencyLimit, RateLimit
from caravel.jobs import ClaimedJob
from caravel.store.protocol import QueueLimit, ReadStore, Store
from tests.store.conformance.builders import QUEUE, T0, claim, insert, new_job

SECOND = 1000


def _rate(
    rate: int | None = None, per_key: int | None = None, period: timedelta = timedelta(seconds=1)
) -> RateLimit:
    return RateLimit(queue=QUEUE, rate=rate, per_key=per_key, period=period)


async def _claimed(store: Store, now: int, limit: int = 50) -> list[ClaimedJob]:
    return (await claim(store, now, limit, limited=True)).claimed


def _most_in_any_window(starts: Sequence[tuple[int, int]], period: int) -> int:
    """The largest total weight of ``(at, weight)`` starts within any window (t - period, t]."""
    return max(
        (sum(w for at, w in starts if end - period < at <= end) for end, _ in starts), default=0
    )


# ----- storing rates --------------------------------------------------------------------------


async def test_a_rate_is_stored_beside_the_concurrency_caps_and_cleared_by_kind(
    store: Store, reader: ReadStore
) -> None:
    stored = await store.queue_limit_set(_rate(20, 5, timedelta(minutes=1)), T0)
    assert stored == QueueLimit(QUEUE, None, None, T0, 20, 5, 60_000)
    assert await reader.queue_limit_list() == [stored]
    # A concurrency limit keeps the rate, and a rate keeps the concurrency caps.
    both = await store.queue_limit_set(ConcurrencyLimit(queue=QUEUE, concurrency=3), T0 + 1)
    assert both == QueueLimit(QUEUE, 3, None, T0 + 1, 20, 5, 60_000)
    replaced = await store.queue_limit_set(_rate(per_key=2), T0 + 2)
    assert replaced == QueueLimit(QUEUE, 3, None, T0 + 2, None, 2, 1000)
    assert await store.queue_limit_list() == [replaced]

    assert await store.queue_limit_clear(QUEUE, T0 + 3, "rate") is True
    assert await store.queue_limit_list() == [QueueLimit(QUEUE, 3, None, T0 + 3)]
    assert await store.queue_limit_clear(QUEUE, T0 + 4, "rate") is False
    await store.queue_limit_set(_rate(7), T0 + 5)
    assert await store.queue_limit_clear(QUEUE, T0 + 6, "concurrency") is True
    assert await store.queue_limit_list() == [QueueLimit(QUEUE, None, None, T0 + 6, 7, None, 1000)]
    # Clearing the last kind removes the queue's row.
    assert await store.queue_limit_clear(QUEUE, T0 + 7, "rate") is True
    assert await store.queue_limit_list() == []
    await store.queue_limit_set(_rate(7), T0 + 8)
    assert await store.queue_limit_clear(QUEUE, T0 + 9) is True
    assert await store.queue_limit_list() == []


def _forced(**fields: object) -> RateLimit:
    """A rate with ``fields`` forced past its own checks, as a careless caller could."""
    limit = _rate(5, 2)
    for name, value in fields.items():
        object.__setattr__(limit, name, value)
    return limit


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"rate": 0}, "rate"),
        ({"rate": -1}, "rate"),
        ({"rate": 1_000_001}, "rate"),
        ({"rate": True}, "rate"),
        ({"per_key": 0}, "per_key"),
        ({"per_key": -5}, "per_key"),
        ({"rate": None, "per_key": None}, "rate"),
        ({"period": timedelta(milliseconds=999)}, "period"),
        ({"period": timedelta(0)}, "period"),
        ({"period": timedelta(seconds=-1)}, "period"),
        ({"period": timedelta(days=1, milliseconds=1)}, "period"),
        ({"period": timedelta(seconds=1, microseconds=1)}, "period"),
        ({"period": 60}, "period"),
        ({"queue": "Not A Queue"}, "queue"),
    ],
)
async def test_a_bad_rate_is_refused_naming_the_field_and_nothing_is_stored(
    store: Store, fields: dict[str, object], field: str
) -> None:
    await store.queue_limit_set(_rate(7), T0)
    with pytest.raises(ValidationError) as raised:
        await store.queue_limit_set(_forced(**fields), T0 + 1)
    assert raised.value.field == field
    args = {"queue": QUEUE, "rate": 5, "per_key": 2, **fields}
    with pytest.raises(ValidationError) as constructed:
        RateLimit(**args)  # type: ignore[arg-type]
    assert constructed.value.field == field
    assert await store.queue_limit_list() == [QueueLimit(QUEUE, None, None, T0, 7, None, 1000)]


async def test_the_period_bounds_are_accepted(store: Store) -> None:
    day = await store.queue_limit_set(_rate(1, period=timedelta(days=1)), T0)
    assert day.rate_period_ms == 86_400_000
    assert (await store.queue_limit_set(_rate(1), T0)).rate_period_ms == 1000


@pytest.mark.parametrize(("rate", "per_key", "field"), [(4, None, "rate"), (10, 4, "per_key")])
async def test_a_rate_below_a_waiting_jobs_weight_is_refused(
    store: Store, rate: int, per_key: int | None, field: str
) -> None:
    await insert(store, [new_job(0, weight=5), new_job(1)])
    with pytest.raises(ValidationError) as raised:
        await store.queue_limit_set(_rate(rate, per_key), T0)
    assert raised.value.field == field
    assert await store.queue_limit_list() == []
    assert (await store.queue_limit_set(_rate(5), T0)).rate == 5


# ----- the window -----------------------------------------------------------------------------


async def test_a_rate_allows_at_most_its_starts_within_the_period(store: Store) -> None:
    await insert(store, [new_job(n) for n in range(10)])
    await store.queue_limit_set(_rate(3), T0)
    assert len(await _claimed(store, T0 + 1)) == 3
    assert await _claimed(store, T0 + 500) == []
    # The start at T0 + 1 is within (T0, T0 + 1000]; it leaves the window after T0 + 1001.
    assert await _claimed(store, T0 + SECOND) == []
    assert len(await _claimed(store, T0 + SECOND + 1)) == 3
    # Finishing jobs frees no rate: only time does.
    assert await _claimed(store, T0 + SECOND + 2) == []


async def test_a_burst_at_the_period_boundary_does_not_double_the_rate(store: Store) -> None:
    rate = 4
    await insert(store, [new_job(n) for n in range(20)])
    await store.queue_limit_set(_rate(rate), T0)
    starts: list[tuple[int, int]] = []
    # Claims at the end of one period, at the boundary, just after it, and every 250 ms.
    for at in (T0 + 999, T0 + 1000, T0 + 1001, T0 + 1500, T0 + 1998, T0 + 1999, T0 + 2000):
        starts += [(at, 1)] * len(await _claimed(store, at, limit=rate))
    for at in range(T0 + 2001, T0 + 4000, 250):
        starts += [(at, 1)] * len(await _claimed(store, at))
    assert [at for at, _ in starts][:8] == [T0 + 999] * 4 + [T0 + 1999] * 4
    assert _most_in_any_window(starts, SECOND) == rate
    assert len(starts) > 2 * rate


async def test_a_claim_with_a_clock_behind_another_claims_still_counts_every_start(
    store: Store,
) -> None:
    """A claim reads its clock before it waits for its turn, so it can run after a claim whose
    clock was later: the later claim's tidying of old starts must not hide from it starts that
    are still inside its own window, and its starts are logged no earlier than any before."""
    await insert(store, [new_job(n) for n in range(3)])
    await store.queue_limit_set(_rate(3), T0)
    assert len(await _claimed(store, T0 + 1)) == 3
    await insert(store, [new_job(n) for n in range(3, 6)])
    # A claim at T0 + 1500 finds no expired job: it claims nothing, but runs its turn.
    assert (await claim(store, T0 + 1500, source="expired", limited=True)).claimed == []
    # The late claim's clock says T0 + 900: the three starts at T0 + 1 are in its window.
    assert (await claim(store, T0 + 900, source="ready", limited=True)).claimed == []
    # Once they left the window the rate allows three again.
    assert [job.lease.claimed_at_ms for job in await _claimed(store, T0 + 1002, 2)] == [
        T0 + 1002
    ] * 2
    # A claim whose clock is behind the latest start is logged at that start, never earlier,
    # so the window of every later claim holds it.
    await insert(store, [new_job(n) for n in range(6, 10)])
    [behind] = await _claimed(store, T0 + 700)
    assert behind.lease.claimed_at_ms == T0 + 1002
    assert await _claimed(store, T0 + 2001) == []  # three started at T0 + 1002
    assert len(await _claimed(store, T0 + 2002)) == 3


async def test_weights_count_and_a_heavy_head_is_not_passed_by_lighter_jobs(store: Store) -> None:
    await insert(store, [new_job(0, weight=2), new_job(1, weight=2), new_job(2, weight=1)])
    await store.queue_limit_set(_rate(3), T0)
    first = await _claimed(store, T0 + 1)
    assert [job.payload for job in first] == ['{"n":0}']
    # Job 1 (weight 2) does not fit the 1 left; job 2 behind it waits for it.
    assert await _claimed(store, T0 + 2) == []
    second = await _claimed(store, T0 + 1001)
    assert [job.payload for job in second] == ['{"n":1}', '{"n":2}']


async def test_a_job_heavier_than_the_rate_is_passed_over(store: Store) -> None:
    await store.queue_limit_set(_rate(3), T0)
    await insert(store, [new_job(0, weight=4), new_job(1), new_job(2)])
    claimed = await _claimed(store, T0 + 1)
    assert [job.payload for job in claimed] == ['{"n":1}', '{"n":2}']


async def test_a_rate_per_key_holds_each_key_and_not_the_others(store: Store) -> None:
    await insert(
        store,
        [new_job(n, partition_key="a") for n in range(4)]
        + [new_job(n, partition_key="b") for n in range(4, 6)],
    )
    await store.queue_limit_set(_rate(per_key=2), T0)
    claimed = await _claimed(store, T0 + 1)
    assert sorted(job.payload for job in claimed) == sorted(
        ['{"n":0}', '{"n":1}', '{"n":4}', '{"n":5}']
    )
    assert await _claimed(store, T0 + 1000) == []
    assert len(await _claimed(store, T0 + 1001)) == 2


async def test_rate_and_concurrency_hold_together(store: Store) -> None:
    await insert(store, [new_job(n) for n in range(10)])
    await store.queue_limit_set(_rate(5), T0)
    await store.queue_limit_set(ConcurrencyLimit(queue=QUEUE, concurrency=2), T0)
    first = await _claimed(store, T0 + 1)
    assert len(first) == 2
    await store.job_complete_many([job.lease for job in first], T0 + 2)
    assert len(await _claimed(store, T0 + 3)) == 2
    assert await _claimed(store, T0 + 4) == []


async def test_the_usage_sums_the_weights_started_within_the_window_ending_now(
    store: Store, reader: ReadStore
) -> None:
    await insert(store, [new_job(0, weight=2), new_job(1), new_job(2, weight=3), new_job(3)])
    await store.queue_limit_set(ConcurrencyLimit(queue=QUEUE, concurrency=9), T0)
    (before,) = await reader.queue_limit_usage(QUEUE, T0)
    assert before.rate_used is None  # no rate: nothing to count against
    await store.queue_limit_set(_rate(5), T0)
    assert [u.rate_used for u in await reader.queue_limit_usage(QUEUE, T0)] == [0]
    assert len(await _claimed(store, T0 + 100, limit=2)) == 2  # weights 2 and 1
    assert len(await _claimed(store, T0 + 600)) == 0  # job 2 (weight 3) does not fit the 2 left
    (used,) = await reader.queue_limit_usage(QUEUE, T0 + 600)
    assert (used.rate_used, used.limit.rate, used.running) == (3, 5, 2)
    # A start leaves the window exactly one period after it: (now - period, now].
    assert [u.rate_used for u in await reader.queue_limit_usage(QUEUE, T0 + 1099)] == [3]
    assert len(await _claimed(store, T0 + 1100)) == 2  # weights 3 and 1 (4 of 5)
    assert [u.rate_used for u in await reader.queue_limit_usage(None, T0 + 1100)] == [4]
    # Starts logged ahead of the reader's clock are not in its window yet.
    assert [u.rate_used for u in await reader.queue_limit_usage(QUEUE, T0 + 1099)] == [3]
    assert await store.queue_limit_clear(QUEUE, T0 + 1200, "rate") is True
    (cleared,) = await reader.queue_limit_usage(QUEUE, T0 + 1200)
    assert cleared.rate_used is None


async def test_a_cleared_rate_frees_the_queue_at_once(store: Store) -> None:
    await insert(store, [new_job(n) for n in range(5)])
    await store.queue_limit_set(_rate(1, period=timedelta(hours=1)), T0)
    assert len(await _claimed(store, T0 + 1)) == 1
    assert await _claimed(store, T0 + 2) == []
    assert await store.queue_limit_clear(QUEUE, T0 + 3, "rate") is True
    assert len(await _claimed(store, T0 + 4)) == 4


async def test_claims_at_once_from_two_stores_stay_within_the_rate(
    store: Store, second_store: Store
) -> None:
    await insert(store, [new_job(n) for n in range(40)])
    await store.queue_limit_set(_rate(7), T0)
    batches = await asyncio.gather(
        *(_claimed(s, T0 + 1, limit=3) for s in (store, second_store) * 5)
    )
    assert sum(len(batch) for batch in batches) == 7


async def test_heavier_than_the_rate_jobs_at_the_head_do_not_fill_a_small_claim(
    store: Store,
) -> None:
    # A claim of one with two never-startable jobs ahead still takes the job behind them.
    await store.queue_limit_set(_rate(3), T0)
    await insert(store, [new_job(0, weight=4), new_job(1, weight=5), new_job(2)])
    claimed = await _claimed(store, T0 + 1, limit=1)
    assert [job.payload for job in claimed] == ['{"n":2}']


async def test_a_claim_judges_leases_by_its_own_clock_behind_a_later_logged_start(
    store: Store,
) -> None:
    # One host's clock runs ahead: its claim logs a start at T0 + 1,100. A claim from a host
    # whose clock reads T0 + 900 counts to that start for the rate, but job 0's lease (to
    # T0 + 1,001) is live by its own clock: job 0 is neither taken over nor its key's slot
    # given to job 2.
    await store.queue_limit_set(_rate(100), T0)
    await store.queue_limit_set(ConcurrencyLimit(queue=QUEUE, per_key=1), T0)
    await insert(
        store,
        [
            new_job(0, partition_key="a"),
            new_job(1, partition_key="b"),
            new_job(2, partition_key="a"),
        ],
    )
    [first] = (await claim(store, T0 + 1, 1, lease_ms=1000, limited=True)).claimed
    assert first.payload == '{"n":0}'
    [ahead] = (await claim(store, T0 + 1100, 1, source="ready", limited=True)).claimed
    assert ahead.payload == '{"n":1}'
    behind = (await claim(store, T0 + 900, 10, lease_ms=1000, limited=True)).claimed
    assert behind == []
    # By the later clock the lease is over: the key's next claim takes job 0 over.
    later = (await claim(store, T0 + 1101, 10, lease_ms=1000, limited=True)).claimed
    assert [job.payload for job in later] == ['{"n":0}']
