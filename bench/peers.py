"""The peers, measured the same way in the same run when they are installed (the optional
``bench`` extra): pgqueuer and procrastinate on PostgreSQL. Each gets a fresh database, the same
number of no-op jobs and the same measurements as Caravel: one call per job, bulk enqueue, and
a drain to completion. Only their public APIs are used; nothing of theirs is copied here.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from datetime import timedelta
from typing import Any

PEERS = ("pgqueuer", "procrastinate")
#: pgqueuer's dequeue batch in the drain (the faster of 100 and 1,000 on the reference machine).
DRAIN_BATCH = 1000
#: procrastinate drains at a few hundred jobs a second: its runs use at most this many jobs.
PROCRASTINATE_JOBS = 5000


def installed(peer: str) -> bool:
    return importlib.util.find_spec(peer) is not None


def _dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


# ----- pgqueuer --------------------------------------------------------------------------------


async def _pgqueuer(url: str, single: int, jobs: int, batch: int) -> dict[str, Any]:
    import psycopg
    from pgqueuer import PsycopgDriver, Queries, QueueManager
    from pgqueuer.models import Job
    from pgqueuer.types import QueueExecutionMode

    conn = await psycopg.AsyncConnection.connect(_dsn(url), autocommit=True)
    queries = Queries(PsycopgDriver(conn))
    await queries.install()
    started = time.perf_counter()
    for i in range(single):
        await queries.enqueue("noop", f"{i}".encode(), dedupe_key=f"single-{i}")
    enqueue_rate = single / (time.perf_counter() - started)
    await conn.execute("DELETE FROM pgqueuer")

    started = time.perf_counter()
    for first in range(0, jobs, batch):
        count = min(batch, jobs - first)
        await queries.enqueue(
            ["noop"] * count,
            [f"{first + n}".encode() for n in range(count)],
            [0] * count,
            dedupe_key=[f"bulk-{first + n}" for n in range(count)],
        )
    bulk_rate = jobs / (time.perf_counter() - started)

    done = 0
    finished = 0.0
    manager = QueueManager(queries)

    @manager.entrypoint("noop")
    async def noop(job: Job) -> None:
        nonlocal done, finished
        done += 1
        if done == jobs:
            finished = time.perf_counter()

    started = time.perf_counter()
    await manager.run(
        batch_size=DRAIN_BATCH,
        mode=QueueExecutionMode.drain,
        dequeue_timeout=timedelta(seconds=1),
    )
    # Until the last handler ran: pgqueuer's own wait for an empty queue is not counted.
    drain_rate = jobs / (finished - started)
    await conn.close()
    assert done == jobs, (done, jobs)
    return {
        "enqueue_jobs_per_second": enqueue_rate,
        "bulk_jobs_per_second": bulk_rate,
        "drain_jobs_per_second": drain_rate,
        "drain_batch_size": DRAIN_BATCH,
    }


# ----- procrastinate ---------------------------------------------------------------------------


async def _procrastinate(url: str, single: int, jobs: int, batch: int) -> dict[str, Any]:
    import procrastinate

    jobs = min(jobs, PROCRASTINATE_JOBS)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=_dsn(url)))
    done = 0

    @app.task(name="noop", queue="bench")
    async def noop(n: int) -> None:
        nonlocal done
        done += 1

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        started = time.perf_counter()
        for i in range(single):
            await noop.configure(queueing_lock=f"single-{i}").defer_async(n=i)
        enqueue_rate = single / (time.perf_counter() - started)
        await app.job_manager.connector.execute_query_async("DELETE FROM procrastinate_jobs")

        started = time.perf_counter()
        for first in range(0, jobs, batch):
            count = min(batch, jobs - first)
            await noop.batch_defer_async(*({"n": first + n} for n in range(count)))
        bulk_rate = jobs / (time.perf_counter() - started)

        started = time.perf_counter()
        await app.run_worker_async(queues=["bench"], concurrency=100, wait=False)
        drain_rate = jobs / (time.perf_counter() - started)
    assert done == jobs, (done, jobs)
    return {
        "enqueue_jobs_per_second": enqueue_rate,
        "bulk_jobs_per_second": bulk_rate,
        "drain_jobs_per_second": drain_rate,
        "drain_jobs": jobs,
        "drain_concurrency": 100,
    }


def measure(peer: str, url: str, single: int, jobs: int, batch: int = 1000) -> dict[str, Any]:
    """One run of ``peer`` against the fresh, empty PostgreSQL database at ``url``."""
    run = {"pgqueuer": _pgqueuer, "procrastinate": _procrastinate}[peer]
    return asyncio.run(run(url, single, jobs, batch))
