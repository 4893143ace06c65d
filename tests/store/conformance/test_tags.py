"""Tags: stored by every insert strategy, read back on the status, filtered exactly in listings,
and left out of the idempotency check (a repeat with other tags is the same job, unchanged)."""

from __future__ import annotations

import pytest

from caravel.store.protocol import JobFilter, NewJob, Store
from tests.store.conformance.builders import (
    T0,
    claim,
    everything,
    ids,
    insert,
    many,
    new_job,
    status,
)


def tagged(job: NewJob, *tags: str) -> NewJob:
    """``job`` carrying ``tags`` in the column's stored form."""
    return job._replace(tags="," + ",".join(tags) + "," if tags else None)


# Crossing every insert strategy a store may pick by size (see test_insert.py).
@pytest.mark.parametrize("count", [1, 5, 20])
async def test_every_insert_strategy_stores_the_tags(store: Store, count: int) -> None:
    jobs = [
        tagged(job, *(("billing", f"customer:{n}") if n % 2 == 0 else ()))
        for n, job in enumerate(many(count, created_at=T0))
    ]
    await insert(store, jobs)
    for n, job in enumerate(jobs):
        found = await status(store, job)
        assert found.tags == (("billing", f"customer:{n}") if n % 2 == 0 else ())


async def test_the_path_that_skips_existing_rows_stores_the_tags_too(store: Store) -> None:
    # A batch whose first job is already there goes to the path that skips rows (PostgreSQL's
    # arrays); the others are new and keep their tags.
    first = tagged(new_job(0, key="k-0"), "seen")
    await insert(store, [first])
    rest = [tagged(job, "batch", f"n:{n}") for n, job in enumerate(many(19, start=1), start=1)]
    result = await insert(store, [first, *rest])
    assert [o.inserted for o in result.outcomes] == [False] + [True] * 19
    for n, job in enumerate(rest, start=1):
        assert (await status(store, job)).tags == ("batch", f"n:{n}")


async def test_a_listing_keeps_only_jobs_with_the_exact_tag(store: Store) -> None:
    jobs = [
        tagged(new_job(0, created_at=T0), "billing"),
        tagged(new_job(1, created_at=T0 + 1), "billing-eu", "urgent"),
        tagged(new_job(2, created_at=T0 + 2), "urgent", "billing"),
        tagged(new_job(3, created_at=T0 + 3), "a_b"),
        tagged(new_job(4, created_at=T0 + 4), "axb"),
        tagged(new_job(5, created_at=T0 + 5), "customer:42"),
        new_job(6, created_at=T0 + 6),
        tagged(new_job(7, queue="other", created_at=T0 + 7), "billing"),
    ]
    await insert(store, jobs)

    async def tagged_with(tag: str, **where: object) -> list[object]:
        return ids(await everything(store, tag=tag, **where))

    assert await tagged_with("billing") == ids([jobs[0], jobs[2], jobs[7]])
    # Neither a prefix nor a longer tag that starts with it.
    assert await tagged_with("bill") == []
    assert await tagged_with("billing-eu") == ids([jobs[1]])
    assert await tagged_with("urgent") == ids([jobs[1], jobs[2]])
    # '_' is a wildcard to LIKE: escaped, it matches only itself.
    assert await tagged_with("a_b") == ids([jobs[3]])
    assert await tagged_with("customer:42") == ids([jobs[5]])
    assert await tagged_with("customer") == []
    # With the other filters, every one must match.
    assert await tagged_with("billing", queue="other") == ids([jobs[7]])
    assert await tagged_with("urgent", queue="other") == []


async def test_the_tag_filter_pages_and_judges_shown_state(store: Store) -> None:
    jobs = [tagged(new_job(n, created_at=T0 + n), "nightly") for n in range(5)]
    await insert(store, [*jobs, new_job(9, created_at=T0 + 9)])
    running = {c.job_id for c in (await claim(store, T0 + 100, 2)).claimed}
    page = await store.job_list(JobFilter(tag="nightly", limit=2, offset=1))
    assert ids(page) == ids([jobs[3], jobs[2]])
    shown = await store.job_list(JobFilter(tag="nightly", shown="running", now=T0 + 100))
    assert set(ids(shown)) == running


async def test_a_repeat_with_other_tags_returns_the_original_job_unchanged(store: Store) -> None:
    original = tagged(new_job(1, key="order-1"), "billing")
    await insert(store, [original])
    again = tagged(new_job(1, key="order-1"), "other", "more")
    untagged = new_job(1, key="order-1")
    for repeat in (again, untagged):
        (outcome,) = (await insert(store, [repeat])).outcomes
        assert (outcome.job_id, outcome.inserted) == (original.id, False)
    assert (await status(store, original)).tags == ("billing",)
    assert ids(await everything(store, tag="other")) == []
