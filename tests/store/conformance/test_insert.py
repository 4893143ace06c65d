"""``job_insert_many``: what lands, in what order, and how repeats and conflicts are settled.

Sizes cross every insert strategy a store may pick by ``total`` (PostgreSQL: one row, VALUES
rows, COPY in chunks with a fallback that skips rows already there): 1, 5, 20, and 600 drawn in
chunks of 250.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

import pytest

from caravel.clock import from_ms
from caravel.errors import IdempotencyConflictError
from caravel.jobs import JobState
from caravel.store.protocol import ClaimRequest, InsertOutcome, NewJob, Store
from tests.store.conformance.builders import (
    LEASE_MS,
    QUEUE,
    T0,
    TENANT,
    chunked,
    everything,
    ids,
    insert,
    many,
    new_job,
    payload,
    ref,
    status,
)

SIZES = [1, 5, 20, 600]
#: Sizes with room for a repeat after the first job.
SEVERAL = [2, 5, 20, 600]


def varied(count: int) -> list[NewJob]:
    """Jobs that differ in every column a caller sets."""
    return [
        new_job(
            n,
            queue=("default", "other")[n % 2],
            tenant=f"tenant-{n % 3}",
            key=f"key-{n}" if n % 4 else None,
            job_type=f"tests.kind{n % 2}.v1",
            body=payload(n=n, note='é✓ "quoted"'),
            max_attempts=1 + n % 5,
            created_at=T0 + n,
            due_at=T0 + n + (n % 3) * 1_000,
            trace_context='{"traceparent":"00-ab-cd-01"}' if n % 2 else None,
        )
        for n in range(count)
    ]


async def test_an_empty_call_inserts_nothing(store: Store) -> None:
    result = await store.job_insert_many([], total=0)
    assert (result.jobs, result.outcomes) == ([], [])
    assert await everything(store) == []


@pytest.mark.parametrize("size", SIZES)
async def test_every_job_lands_with_the_values_given(store: Store, size: int) -> None:
    jobs = varied(size)

    result = await insert(store, jobs)

    assert result.jobs == jobs
    assert result.outcomes == [InsertOutcome(job.id, inserted=True) for job in jobs]
    stored = {s.job_id: s for s in await everything(store)}
    assert len(stored) == size
    for job in jobs:
        got = stored[job.id]
        assert (got.queue, got.tenant_id, got.job_type) == (job.queue, job.tenant_id, job.job_type)
        assert (got.state, got.attempt, got.max_attempts) == (JobState.READY, 0, job.max_attempts)
        assert got.due_at == from_ms(job.due_at)
        assert got.created_at == got.updated_at == from_ms(job.created_at)
        assert (got.started_at, got.finished_at, got.lease_expires_at) == (None, None, None)
        assert got.last_failure is None
    for job in jobs[::25] + jobs[-1:]:
        assert await store.job_get_payload(ref(job)) == job.payload


@pytest.mark.parametrize("size", SIZES)
async def test_the_trace_context_comes_back_with_the_claim(store: Store, size: int) -> None:
    jobs = [
        new_job(n, trace_context=f'{{"traceparent":"00-{n}-1-01"}}' if n % 2 else None)
        for n in range(size)
    ]
    await insert(store, jobs)
    batch = await store.job_claim_many(ClaimRequest(QUEUE, size, T0, LEASE_MS))
    assert {c.job_id: c.trace_context for c in batch.claimed} == {
        j.id: j.trace_context for j in jobs
    }
    assert {c.job_id: c.payload for c in batch.claimed} == {j.id: j.payload for j in jobs}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("where", ["first", "last"])
async def test_an_existing_key_with_the_same_content_returns_the_existing_job(
    store: Store, size: int, where: str
) -> None:
    original = new_job(7, key="k-taken")
    await insert(store, [original])
    before = await status(store, original)
    again = new_job(7, key="k-taken", created_at=T0 + 5)  # a new id, the same content
    fresh = many(size - 1, start=100, created_at=T0 + 5)
    jobs = [again, *fresh] if where == "first" else [*fresh, again]

    result = await insert(store, jobs)

    expected = [
        InsertOutcome(original.id, inserted=False)
        if job is again
        else InsertOutcome(job.id, inserted=True)
        for job in jobs
    ]
    assert result.outcomes == expected
    assert await status(store, original) == before
    assert await store.job_get(ref(again)) is None
    assert len(await everything(store)) == size


@pytest.mark.parametrize("size", SEVERAL)
async def test_a_key_repeated_in_one_call_makes_one_job(store: Store, size: int) -> None:
    jobs = many(size - 1)
    repeat = new_job(0, key="k-0", created_at=T0 + 1)  # the first job again, under a new id
    result = await insert(store, [*jobs, repeat])

    assert result.outcomes == [
        *(InsertOutcome(job.id, inserted=True) for job in jobs),
        InsertOutcome(jobs[0].id, inserted=False),
    ]
    assert len(await everything(store)) == size - 1
    assert await store.job_get(ref(repeat)) is None


#: Ways a job can differ from the one that holds its key.
OTHER_CONTENT = {
    "payload": {"body": payload(n=999)},
    "job_type": {"job_type": "tests.other.v1"},
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("differs", list(OTHER_CONTENT))
async def test_an_existing_key_with_other_content_conflicts_and_nothing_is_written(
    store: Store, size: int, differs: str
) -> None:
    original = new_job(7, key="k-taken")
    await insert(store, [original])
    before = await status(store, original)
    clash = new_job(7, key="k-taken", created_at=T0 + 5, **OTHER_CONTENT[differs])
    # With 600 jobs the clash is in the third chunk: the first two must not stay either.
    jobs = [*many(size - 1, start=100, created_at=T0 + 5), clash]

    with pytest.raises(IdempotencyConflictError) as caught:
        await insert(store, jobs)

    assert caught.value.job_id == original.id
    assert await everything(store) == [before]
    # Nothing of the call was kept: its other keys are still free.
    retried = await insert(store, jobs[:-1])
    assert all(outcome.inserted for outcome in retried.outcomes)


@pytest.mark.parametrize("size", SEVERAL)
async def test_a_key_repeated_in_one_call_with_other_content_conflicts(
    store: Store, size: int
) -> None:
    jobs = [*many(size - 1), new_job(0, key="k-0", body=payload(n=-1), created_at=T0 + 1)]
    with pytest.raises(IdempotencyConflictError):
        await insert(store, jobs)
    assert await everything(store) == []


@pytest.mark.parametrize("size", SIZES)
async def test_jobs_inserted_again_under_their_ids_are_skipped(store: Store, size: int) -> None:
    jobs = many(size, keyed=False)
    await insert(store, jobs)
    before = await everything(store)
    fresh = new_job(-1, created_at=T0 + 1)

    # As a relay resending the same intents: the ids are the identity; one new job among them.
    result = await insert(store, [*jobs, fresh])

    assert result.outcomes == [
        *(InsertOutcome(job.id, inserted=False) for job in jobs),
        InsertOutcome(fresh.id, inserted=True),
    ]
    assert await everything(store) == [*before, await status(store, fresh)]


@pytest.mark.parametrize("size", SIZES)
async def test_an_existing_id_with_other_content_conflicts(store: Store, size: int) -> None:
    original = new_job(1)
    await insert(store, [original])
    before = await status(store, original)
    jobs = [*many(size - 1, start=100), original._replace(payload=payload(n=2))]

    with pytest.raises(IdempotencyConflictError) as caught:
        await insert(store, jobs)

    assert caught.value.job_id == original.id
    assert await everything(store) == [before]
    assert await store.job_get_payload(ref(original)) == original.payload


@pytest.mark.parametrize("size", SEVERAL)
async def test_an_id_repeated_in_one_call_makes_one_job(store: Store, size: int) -> None:
    jobs = many(size - 1, keyed=False)
    result = await insert(store, [*jobs, jobs[0]])
    assert [outcome.job_id for outcome in result.outcomes] == [*(j.id for j in jobs), jobs[0].id]
    assert len(await everything(store)) == size - 1


#: The SQL stores, whose shared insert (``SqlStore._outcomes``) has the two known bugs below.
SQL_STORES = ("postgresql", "sqlite", "mariadb")


def sql_store_bug(store: Store, request: pytest.FixtureRequest, reason: str) -> None:
    """Expect the test to fail on the SQL stores until their bug is fixed (strictly: a fix
    makes it pass and the marker must go); other stores must pass it."""
    if store.db_system in SQL_STORES:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"store bug: {reason}"))


@pytest.mark.parametrize("size", SEVERAL)
async def test_an_id_repeated_in_one_call_is_reported_as_not_inserted(
    store: Store, size: int, request: pytest.FixtureRequest
) -> None:
    sql_store_bug(
        store,
        request,
        "a job repeated under the same id in one call is reported as inserted twice (the "
        "key rule reports the repeat as not inserted), so enqueue counts it twice",
    )
    jobs = many(size - 1, keyed=False)
    result = await insert(store, [*jobs, jobs[0]])
    assert result.outcomes[-1] == InsertOutcome(jobs[0].id, inserted=False)


@pytest.mark.parametrize("size", SEVERAL)
async def test_an_id_repeated_in_one_call_with_other_content_conflicts(
    store: Store, size: int, request: pytest.FixtureRequest
) -> None:
    sql_store_bug(
        store,
        request,
        "the same id twice in one call with different payloads raises no "
        "IdempotencyConflictError; both are reported inserted and the second payload is dropped",
    )
    jobs = many(size - 1, keyed=False)
    with pytest.raises(IdempotencyConflictError):
        await insert(store, [*jobs, jobs[0]._replace(payload=payload(n=-1))])
    assert await everything(store) == []


class Boom(Exception):
    """Raised while the caller prepares a chunk."""


def failing_after(
    jobs: Sequence[NewJob], size: int, good_chunks: int
) -> Iterator[Sequence[NewJob]]:
    """``good_chunks`` chunks of ``jobs``, then an error while drawing the next."""
    drawn = chunked(jobs, size)
    for _ in range(good_chunks):
        yield next(drawn)
    raise Boom


@pytest.mark.parametrize(("size", "chunk"), [(5, 2), (600, 250)])
@pytest.mark.parametrize("collision", [False, True], ids=["all-new", "after-a-collision"])
async def test_an_error_while_drawing_a_later_chunk_rolls_back_the_earlier_ones(
    store: Store, size: int, chunk: int, collision: bool
) -> None:
    original = new_job(3, key="k-3")
    if collision:  # an early job meets a stored key (PostgreSQL's COPY then starts over)
        await insert(store, [original])
    jobs = many(size, created_at=T0 + 1)

    with pytest.raises(Boom):
        await store.job_insert_many(failing_after(jobs, chunk, 2), total=size)

    assert ids(await everything(store)) == ([original.id] if collision else [])
    # The store is still usable, and nothing of the failed call was kept.
    result = await insert(store, jobs, chunk=chunk)
    assert sum(not outcome.inserted for outcome in result.outcomes) == (1 if collision else 0)


@pytest.mark.parametrize("size", [5, 20])
async def test_keyless_jobs_never_collide(store: Store, size: int) -> None:
    # The same content every time, no key: each one is a job of its own.
    first = [new_job(1) for _ in range(size)]
    second = [new_job(1, created_at=T0 + 1) for _ in range(size)]
    for jobs in (first, second):
        result = await insert(store, jobs)
        assert all(outcome.inserted for outcome in result.outcomes)
    assert len(await everything(store)) == 2 * size


async def test_keys_are_per_queue_and_tenant_and_case_sensitive(store: Store) -> None:
    scopes = [  # (queue, tenant, key)
        (QUEUE, TENANT, "k"),
        ("other", TENANT, "k"),
        (QUEUE, "tenant-b", "k"),
        (QUEUE, "Tenant-A", "k"),
        (QUEUE, TENANT, "K"),
    ]
    originals = [new_job(1, queue=q, tenant=t, key=k) for q, t, k in scopes]
    result = await insert(store, originals)
    assert all(outcome.inserted for outcome in result.outcomes)

    # Each one submitted again (new id, same content) finds its own original, and only it.
    for (q, t, k), original in zip(scopes, originals, strict=True):
        again = await insert(store, [new_job(1, queue=q, tenant=t, key=k, created_at=T0 + 1)])
        assert again.outcomes == [InsertOutcome(original.id, inserted=False)]
    assert len(await everything(store)) == len(scopes)


async def test_concurrent_inserts_of_one_key_make_one_job(
    store: Store, second_store: Store
) -> None:
    one, two = new_job(1, key="k"), new_job(1, key="k")
    first, second = await asyncio.gather(insert(store, [one]), insert(second_store, [two]))
    outcomes = [*first.outcomes, *second.outcomes]
    assert sorted(outcome.inserted for outcome in outcomes) == [False, True]
    (winner,) = {outcome.job_id for outcome in outcomes}
    assert winner in (one.id, two.id)
    assert ids(await everything(store)) == [winner]
