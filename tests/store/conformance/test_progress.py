"""``job_set_progress``: what a running handler reports, stored under its lease. It is fenced
exactly as an acknowledgement is (same id, same token, still running): a worker whose lease was
taken over, or whose job finished or was cancelled, changes nothing and is told so. What is
stored is read back by every status read and kept after the job finishes; a tombstone keeps
none of it.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from caravel.clock import from_ms
from caravel.jobs import CancelOutcome, JobState, Lease
from caravel.progress import JobProgress
from caravel.store.protocol import JobFilter, NewJob, ProgressUpdate, ReadStore, Store
from caravel.store.pruning import PruneRequest
from tests.store.conformance.builders import (
    LEASE_MS,
    T0,
    claim_one,
    fail,
    insert,
    new_job,
    ref,
    status,
)

PROGRESS = '{"done":3,"total":10,"note":"resizing"}'
META = '{"rows":42,"source":"s3://bucket/key"}'


async def claimed(store: Store, job: NewJob, now: int = T0, lease_ms: int = LEASE_MS) -> Lease:
    await insert(store, [job])
    got = await claim_one(store, now, lease_ms=lease_ms)
    assert got.job_id == job.id
    return got.lease


async def test_progress_and_meta_are_stored_and_read_back(store: Store, reader: ReadStore) -> None:
    job = new_job()
    lease = await claimed(store, job)
    before = await status(store, job)
    assert (before.progress, before.meta) == (None, {})

    assert await store.job_set_progress(ProgressUpdate(lease, T0 + 500, PROGRESS, META)) is True

    expected = JobProgress(done=3, total=10, note="resizing", updated_at=from_ms(T0 + 500))
    got = await status(store, job)
    assert got.progress == expected
    assert got.meta == {"rows": 42, "source": "s3://bucket/key"}
    # A report is not a change of state: the job's own times stay.
    assert dataclasses.replace(got, progress=None, meta={}) == before
    # Every read of a status carries it: a listing, a lookup by id alone, the reader.
    listed = await store.job_list(JobFilter(limit=10))
    assert [(s.progress, s.meta) for s in listed] == [(expected, got.meta)]
    found = await store.job_find(job.id)
    assert found is not None
    assert (found.progress, found.meta) == (expected, got.meta)
    read = await reader.job_get(ref(job))
    assert read is not None
    assert (read.progress, read.meta) == (expected, got.meta)


async def test_each_part_is_written_only_when_given(store: Store) -> None:
    job = new_job()
    lease = await claimed(store, job)
    assert await store.job_set_progress(ProgressUpdate(lease, T0 + 1, PROGRESS, META))

    # Metadata alone: the progress and its time stay.
    assert await store.job_set_progress(ProgressUpdate(lease, T0 + 2, None, '{"rows":43}'))
    got = await status(store, job)
    assert got.progress is not None
    assert got.progress.updated_at == from_ms(T0 + 1)
    assert got.meta == {"rows": 43}

    # Progress alone: the metadata stays.
    later = '{"done":7.5,"total":null,"note":null}'
    assert await store.job_set_progress(ProgressUpdate(lease, T0 + 3, later))
    got = await status(store, job)
    assert got.progress == JobProgress(7.5, None, None, from_ms(T0 + 3))
    assert got.meta == {"rows": 43}

    # Neither: nothing to write, nothing written.
    assert await store.job_set_progress(ProgressUpdate(lease, T0 + 4, None, None)) is False
    assert await status(store, job) == got


async def test_a_stale_lease_is_refused_after_a_take_over(store: Store) -> None:
    job = new_job()
    old = await claimed(store, job, lease_ms=1_000)
    assert await store.job_set_progress(ProgressUpdate(old, T0 + 10, PROGRESS, META))
    # The lease expires and another worker claims the job: the first worker is fenced off.
    current = (await claim_one(store, T0 + 1_000)).lease
    assert current.token != old.token
    before = await status(store, job)

    stale = ProgressUpdate(old, T0 + 1_500, '{"done":9,"total":10,"note":null}', '{"x":1}')
    assert await store.job_set_progress(stale) is False

    assert await status(store, job) == before
    # The new holder writes, over what the stale one left.
    fresh = ProgressUpdate(current, T0 + 1_600, '{"done":1,"total":10,"note":null}', "{}")
    assert await store.job_set_progress(fresh) is True
    got = await status(store, job)
    assert got.progress == JobProgress(1, 10, None, from_ms(T0 + 1_600))
    assert got.meta == {}


async def test_a_lease_that_expired_but_was_not_taken_over_still_reports(store: Store) -> None:
    # The token is the fence, as for an acknowledgement.
    job = new_job()
    lease = await claimed(store, job, lease_ms=1_000)
    assert await store.job_set_progress(ProgressUpdate(lease, T0 + 5_000, PROGRESS))
    assert (await status(store, job)).progress is not None


async def test_a_forged_token_or_an_unknown_job_is_refused(store: Store) -> None:
    job = new_job()
    lease = await claimed(store, job)
    forged = dataclasses.replace(lease, token=lease.token + 10**9)
    assert await store.job_set_progress(ProgressUpdate(forged, T0 + 1, PROGRESS, META)) is False
    other = dataclasses.replace(lease, job_id=new_job(1).id)
    assert await store.job_set_progress(ProgressUpdate(other, T0 + 1, PROGRESS, META)) is False
    got = await status(store, job)
    assert (got.progress, got.meta) == (None, {})


async def test_what_was_reported_is_kept_after_completion_and_refused_after(
    store: Store,
) -> None:
    job = new_job()
    lease = await claimed(store, job)
    assert await store.job_set_progress(ProgressUpdate(lease, T0 + 1, PROGRESS, META))
    assert await store.job_complete_many([lease], T0 + 2) == {job.id}

    assert await store.job_set_progress(ProgressUpdate(lease, T0 + 3, "{}", "{}")) is False
    got = await status(store, job)
    assert got.state is JobState.COMPLETED
    assert got.progress == JobProgress(3, 10, "resizing", from_ms(T0 + 1))
    assert got.meta == {"rows": 42, "source": "s3://bucket/key"}


async def test_a_failed_or_cancelled_attempt_reports_no_more(store: Store) -> None:
    failed, cancelled = new_job(1), new_job(2)
    failed_lease = await claimed(store, failed)
    assert await fail(store, failed_lease, T0 + 1, retry_at=T0 + 10_000) == {failed.id}
    cancelled_lease = await claimed(store, cancelled, T0 + 2)
    assert await store.job_cancel(ref(cancelled), T0 + 3) is CancelOutcome.CANCELLED_RUNNING

    for lease in (failed_lease, cancelled_lease):
        assert await store.job_set_progress(ProgressUpdate(lease, T0 + 4, PROGRESS, META)) is False
    for job in (failed, cancelled):
        got = await status(store, job)
        assert (got.progress, got.meta) == (None, {})


async def test_a_tombstone_keeps_no_report(store: Store) -> None:
    job = new_job(key="k-1")
    lease = await claimed(store, job)
    assert await store.job_set_progress(ProgressUpdate(lease, T0 + 1, PROGRESS, META))
    assert await store.job_complete_many([lease], T0 + 2) == {job.id}

    day = int(timedelta(days=1) / timedelta(milliseconds=1))
    prune = PruneRequest(now=T0 + 10 * day, completed_before=T0 + 5 * day, limit=100)
    batch = await store.job_prune(prune)
    assert batch.tombstoned == 1

    got = await status(store, job)
    assert got.state is JobState.PRUNED
    assert (got.progress, got.meta) == (None, {})
