"""A claim lost with its database, and the claim of the same job on the copy that replaced it:
the two count to the same lease token, yet the lost claim's holder is fenced off.

With asynchronous replication a primary can commit a claim and die before its standby received
it. The promoted standby has the job waiting under the token it had before, and its next claim
counts to the token the lost claim's holder presents. ``another_store`` stands in for that
standby: a second queue given the same job (its enqueue was replicated) and nothing of what
came after it (the claim was not). Both claims are made by one worker at one millisecond, so
neither the claim's time nor its worker tells them apart; what does is each claim's own draw
(:mod:`caravel.store.claims.nonces`).
"""

from __future__ import annotations

import dataclasses
from uuid import uuid4

from caravel.jobs import JobState, Lease
from caravel.store.protocol import (
    FailedAttempt,
    NewJob,
    ProgressUpdate,
    SnoozedAttempt,
    Store,
)
from tests.store.conformance.builders import LEASE_MS, T0, claim_one, insert, new_job, status

WORKER = uuid4()


async def lost_and_taken(primary: Store, standby: Store, job: NewJob) -> tuple[Lease, Lease]:
    """``job`` enqueued on both, then claimed on ``primary`` (the claim the standby never got)
    and on ``standby`` (the claim after the failover): the lost lease and the current one."""
    for store in (primary, standby):
        await insert(store, [job])
    lost = await claim_one(primary, T0, worker_id=WORKER)
    taken = await claim_one(standby, T0, worker_id=WORKER)
    assert lost.job_id == taken.job_id == job.id
    assert lost.lease.token == taken.lease.token
    assert lost.lease.claimed_at_ms == taken.lease.claimed_at_ms
    return lost.lease, taken.lease


async def test_the_lost_claims_holder_cannot_write(store: Store, another_store: Store) -> None:
    job = new_job()
    lost, taken = await lost_and_taken(store, another_store, job)
    before = await status(another_store, job)
    later = T0 + 1_000

    assert await another_store.job_complete_many([lost], later) == set()
    assert await another_store.job_complete_many([lost], later, results={job.id: "1"}) == set()
    failed = FailedAttempt(lost, "HandlerFailed", later + 1_000)
    assert await another_store.job_fail_many([failed], later) == set()
    dead = FailedAttempt(lost, "HandlerFailed", None)
    assert await another_store.job_fail_many([dead], later) == set()
    snoozed = SnoozedAttempt(lost, later + 1_000)
    assert await another_store.job_snooze_many([snoozed], later) == set()
    assert await another_store.job_renew_lease(lost, later, later + LEASE_MS) is None
    update = ProgressUpdate(lost, later, '{"done":1,"total":2,"note":null}', '{"k":1}')
    assert await another_store.job_set_progress(update) is False
    assert await status(another_store, job) == before

    # The holder that took over is not disturbed, and its outcome stands.
    renewed = await another_store.job_renew_lease(taken, later, later + LEASE_MS)
    assert renewed is not None
    assert await another_store.job_complete_many([renewed], later, results={job.id: "2"}) == {
        job.id
    }
    done = await status(another_store, job)
    assert await another_store.job_complete_many([lost], later + 1) == set()
    assert await another_store.job_fail_many([dead], later + 1) == set()
    assert await status(another_store, job) == done
    assert (done.state, done.result) == (JobState.COMPLETED, 2)


async def test_a_batch_acknowledges_only_the_leases_the_standby_handed_out(
    store: Store, another_store: Store
) -> None:
    job = new_job()
    lost, taken = await lost_and_taken(store, another_store, job)
    other = new_job()
    await insert(another_store, [other])
    held = (await claim_one(another_store, T0 + 1, worker_id=WORKER)).lease

    # The lost lease in a batch with a current one: only the current one is acknowledged.
    assert await another_store.job_complete_many([lost, held], T0 + 10) == {other.id}
    assert (await status(another_store, job)).state is JobState.RUNNING
    assert await another_store.job_complete_many([taken], T0 + 20) == {job.id}


async def test_a_lease_without_its_nonce_holds_nothing(store: Store) -> None:
    """The token alone is no proof of a claim: a lease presenting the right token with another
    nonce (or none) is refused."""
    job = new_job()
    await insert(store, [job])
    lease = (await claim_one(store, T0, worker_id=WORKER)).lease
    assert lease.nonce != 0
    for nonce in (0, lease.nonce ^ 1):
        forged = dataclasses.replace(lease, nonce=nonce)
        assert await store.job_renew_lease(forged, T0 + 1, T0 + LEASE_MS) is None
        assert await store.job_complete_many([forged], T0 + 1) == set()
    assert await store.job_complete_many([lease], T0 + 1) == {job.id}
