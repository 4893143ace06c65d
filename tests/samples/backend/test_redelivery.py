"""Crashes, redelivery, restarts and load: a result is never counted twice, pending work
survives the application, and concurrent submissions add up exactly. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from caravel_samples.backend.db import counter_results
from caravel_samples.backend.guards import SESSION_COOKIE
from caravel_samples.backend.jobs import QUEUE, job_scope
from caravel_samples.backend.settings import Settings

from caravel import DatabaseQueue, JobState, Lease, QueueWorker, StoreError
from caravel.store.protocol import Store
from caravel.testing import ManualClock
from tests.samples.backend.support import (
    Running,
    add_user,
    count_rows,
    drain,
    running,
    with_overrides,
)
from tests.support import inspector_of, until

LEASE = timedelta(seconds=60)  # the settings' default lease
PAST_LEASE = LEASE + timedelta(seconds=1)


class AckLosingStore:
    """The application's real queue store, except that acknowledgements never arrive: the
    connection drops right after the handler saved its result."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def job_complete_many(
        self,
        leases: Sequence[Lease],
        now: int,
        *,
        durable: bool = False,
        results: Mapping[UUID, str] | None = None,
    ) -> set[UUID]:
        raise StoreError("job_complete")


def crashing_worker(run: Running) -> QueueWorker:
    """A worker that runs the real handler and then loses its acknowledgement."""
    queue = DatabaseQueue(
        AckLosingStore(run.services.queue.store),  # type: ignore[arg-type]
        run.services.queue.registry,
        options=run.services.queue.options,
        clock=run.services.queue.clock,
    )
    return QueueWorker(queue, scope=job_scope(run.services.engine))


async def test_a_lost_acknowledgement_is_redelivered_without_counting_twice(
    settings: Settings,
) -> None:
    clock = ManualClock()
    await add_user(settings, "alice@example.com")
    async with running(settings, clock=clock) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        job_id = UUID((await alice.submit("k-1", 42)).json()["jobId"])

        async with crashing_worker(run) as crashing:
            with pytest.raises(StoreError):
                await crashing.run_once(QUEUE)
        # The result is saved, the job is still leased to the crashed worker.
        assert await count_rows(settings, "counter_results") == 1
        job = (await alice.client.get(f"/counter/jobs/{job_id}")).json()
        assert (job["state"], job["attempt"]) == ("running", 1)
        assert await drain(run.worker()) == 0  # nobody else may take it while the lease holds

        await clock.advance(PAST_LEASE)
        assert await drain(run.worker()) == 1
        job = (await alice.client.get(f"/counter/jobs/{job_id}")).json()
        assert (job["state"], job["attempt"]) == ("completed", 2)
        assert (await alice.summary())["count"] == 1
        assert (await alice.summary())["total"] == 42
    assert await count_rows(settings, "counter_results") == 1


async def test_a_conflicting_result_row_fails_the_job(settings: Settings) -> None:
    clock = ManualClock()
    user = await add_user(settings, "alice@example.com")
    async with running(settings, clock=clock) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        job_id = UUID((await alice.submit("k-1", 5)).json()["jobId"])
        # A receipt for this job that disagrees with it (another quantity).
        async with run.services.engine.begin() as conn:
            await conn.execute(
                counter_results.insert().values(
                    job_id=job_id,
                    owner_id=user.tenant_id,
                    quantity=6,
                    recorded_at=time.time_ns() // 10**6,
                )
            )
        assert await drain(run.worker()) == 1
        job = (await alice.client.get(f"/counter/jobs/{job_id}")).json()
        assert job["state"] == "ready"  # waiting for its retry
        assert job["failureCategory"] == "HandlerFailed"
        assert (await alice.summary())["total"] == 6  # the stored row is never overwritten


async def test_the_application_can_be_recreated_over_the_same_database(
    settings: Settings,
) -> None:
    clock = ManualClock()
    await add_user(settings, "alice@example.com")
    async with running(settings, clock=clock) as first, first.browser() as alice:
        await alice.sign_in("alice@example.com")
        ids = [(await alice.submit(f"k-{q}", q)).json()["jobId"] for q in (10, 20, 30)]
        async with crashing_worker(first) as crashing:
            with pytest.raises(StoreError):
                await crashing.run_once(QUEUE)  # saved one result, lost its ack
        cookie = alice.client.cookies[SESSION_COOKIE]
        revoked = await alice.client.post("/auth/sessions/revoke", headers=alice.headers())
        assert revoked.status_code == 204
    # The first application is gone: its pools closed, nothing of it left in memory.

    await clock.advance(PAST_LEASE)
    async with running(settings, clock=clock) as second, second.browser() as alice:
        old = await second.client.get("/auth/me", headers={"Cookie": f"{SESSION_COOKIE}={cookie}"})
        assert old.status_code == 401
        # Jobs keep the owner they were submitted with, even after the sessions are revoked.
        assert await drain(second.worker()) == 3
        await alice.sign_in("alice@example.com")
        states = [(await alice.client.get(f"/counter/jobs/{i}")).json() for i in ids]
        assert [s["state"] for s in states] == ["completed"] * 3
        assert sorted(s["attempt"] for s in states) == [1, 1, 2]
        summary = await alice.summary()
        assert (summary["count"], summary["total"]) == (3, 60)
    assert await count_rows(settings, "counter_results") == 3


async def test_96_concurrent_submissions_by_four_users_and_four_workers(
    settings: Settings,
) -> None:
    users = [f"user{n}@example.com" for n in range(4)]
    for email in users:
        await add_user(settings, email)
    wide = with_overrides(settings, limits={"concurrency": 128})
    async with running(wide) as run:
        browsers = [run.browser() for _ in users]
        await asyncio.gather(*(b.sign_in(e) for b, e in zip(browsers, users, strict=True)))
        plan = [
            (browser, f"event-{u}-{n}", (u * 97 + n * 31) % 1000 + 1)
            for u, browser in enumerate(browsers)
            for n in range(24)
        ]
        responses = await asyncio.gather(*(b.submit(k, q) for b, k, q in plan))
        assert [r.status_code for r in responses] == [202] * 96
        assert len({r.json()["jobId"] for r in responses}) == 96

        workers = [run.worker(concurrency=2) for _ in range(4)]
        tasks = [asyncio.create_task(w.run(QUEUE)) for w in workers]
        try:

            async def finished() -> bool:
                (counts,) = await inspector_of(run.services.queue).queue_counts(QUEUE)
                return counts.completed == 96

            await until(finished, what="all 96 jobs to finish", seconds=60, interval=0.05)
        finally:
            for worker in workers:
                worker.stop()
            await asyncio.gather(*tasks)
            for worker in workers:
                await worker.close()

        for u, browser in enumerate(browsers):
            expected = [q for b, _, q in plan if b is browser]
            summary = await browser.summary()
            assert (summary["count"], summary["total"]) == (24, sum(expected)), u
            page = await browser.client.get("/counter/results", params={"limit": 100})
            assert sorted(r["quantity"] for r in page.json()["items"]) == sorted(expected)
            await browser.client.aclose()
        jobs = await inspector_of(run.services.queue).list_jobs(queue=QUEUE, limit=200)
        assert {j.state for j in jobs} == {JobState.COMPLETED}
    assert await count_rows(settings, "counter_results") == 96


async def test_the_in_process_worker_runs_when_enabled(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    async with running(with_overrides(settings, run_worker=True)) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        job_id = (await alice.submit("k-1", 3)).json()["jobId"]

        async def completed() -> bool:
            state = (await alice.client.get(f"/counter/jobs/{job_id}")).json()["state"]
            return bool(state == "completed")

        await until(completed, what="the in-process worker to run the job", seconds=30)
        assert (await alice.summary())["total"] == 3


async def test_the_worker_is_off_unless_enabled(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    async with running(settings) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        job_id = (await alice.submit("k-1", 3)).json()["jobId"]
        await asyncio.sleep(0.3)  # real time for a worker that should not be there to show up
        assert (await alice.client.get(f"/counter/jobs/{job_id}")).json()["state"] == "ready"
