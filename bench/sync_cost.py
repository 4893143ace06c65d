"""What a one-job enqueue costs from synchronous code (:class:`caravel.SyncQueue`) beside the
same call awaited on :class:`caravel.DatabaseQueue`: wall time and this process's CPU per call,
every job with its own idempotency key, on a fresh database per backend.

Run it with ``python -m bench.sync_cost [jobs] [rounds]`` (or ``python -m bench --only sync``):
the rounds alternate between the two callers, so a machine whose speed drifts affects both
alike, and the figures are the medians of the rounds. A third figure is the sync call inside
the caller's own transaction (``session=``, a SQLAlchemy ``Session`` committed per job), which
also pays for the caller's commit.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from bench.apps import Noop, registry
from bench.databases import database
from caravel import DatabaseQueue, DispatchOptions, SyncQueue
from caravel.store.urls import sync_url

QUEUE = "bench"


def _per_call(
    jobs: int, run: Callable[[list[DispatchOptions]], object], keys: list[DispatchOptions]
) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run(keys)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"us_per_call": wall / jobs * 1e6, "cpu_us_per_call": cpu / jobs * 1e6}


def _keys(prefix: str, jobs: int) -> list[DispatchOptions]:
    return [DispatchOptions(queue=QUEUE, idempotency_key=f"{prefix}-{i}") for i in range(jobs)]


def measure(url: str, jobs: int, rounds: int) -> dict[str, Any]:
    """Medians over ``rounds`` of each caller's cost per call."""
    loop = asyncio.new_event_loop()
    async_queue = DatabaseQueue(url, registry)
    sync_queue = SyncQueue(url, registry)
    engine = sa.create_engine(sync_url(url))
    job = Noop(0)
    try:
        # Warm-ups: connections opened, statements prepared, the identity read once.
        loop.run_until_complete(async_queue.enqueue(job, DispatchOptions(queue=QUEUE)))
        sync_queue.enqueue(job, DispatchOptions(queue=QUEUE))
        with Session(engine) as session:
            sync_queue.enqueue(job, DispatchOptions(queue=QUEUE), session=session)
            session.commit()
        figures: dict[str, list[dict[str, float]]] = {"async": [], "sync": [], "sync_session": []}

        async def awaited(keys: list[DispatchOptions]) -> None:
            for options in keys:
                await async_queue.enqueue(job, options)

        def blocking_awaited(keys: list[DispatchOptions]) -> None:
            loop.run_until_complete(awaited(keys))

        def called(keys: list[DispatchOptions]) -> None:
            for options in keys:
                sync_queue.enqueue(job, options)

        def in_session(keys: list[DispatchOptions]) -> None:
            with Session(engine) as session:
                for options in keys:
                    sync_queue.enqueue(job, options, session=session)
                    session.commit()

        for r in range(rounds):
            figures["async"].append(_per_call(jobs, blocking_awaited, _keys(f"a{r}", jobs)))
            figures["sync"].append(_per_call(jobs, called, _keys(f"s{r}", jobs)))
            figures["sync_session"].append(_per_call(jobs, in_session, _keys(f"t{r}", jobs)))
    finally:
        sync_queue.close()
        loop.run_until_complete(async_queue.close())
        loop.close()
        engine.dispose()
    out: dict[str, Any] = {"jobs": jobs, "rounds": rounds}
    for caller, measured in figures.items():
        for key in ("us_per_call", "cpu_us_per_call"):
            out[f"{caller}_{key}"] = round(statistics.median(m[key] for m in measured), 1)
    out["sync_over_async"] = round(out["sync_us_per_call"] / out["async_us_per_call"], 3)
    return out


def run(backends: list[str], jobs: int = 2000, rounds: int = 5) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for backend in backends:
        with database(backend) as url:
            results[backend] = measure(url, jobs, rounds)
    return results


def main() -> None:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    print(json.dumps(run(["postgresql", "sqlite"], jobs, rounds), indent=2))


if __name__ == "__main__":
    main()
