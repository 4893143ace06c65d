"""``python -m bench --only fairness``: how long a small tenant waits behind a large one.

Tenant A has ``--fairness-backlog`` ready jobs (100,000 by default); then tenant B enqueues
``--fairness-jobs`` jobs (100) one by one, one before each claim, while a claimer takes batches
of ``--fairness-batch`` (100) and completes each batch at once (no handler: only the queue's own
cost). B's wait is measured from its enqueue to the claim that took it, in milliseconds and in
claim rounds, with fairness on (``ConcurrencyLimit(fair=True)``: the fair claim) and off (no
limits row: today's plain claim), each on a fresh database in the same run. With fairness off
B waits behind A's backlog: the run stops after ``--fairness-rounds`` claims (by default enough
to drain the backlog) and reports B's jobs not yet started. Also the claim statement's own time
(p50/p99), which shows the fair claim stays bounded with a large backlog.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.apps import QUEUE, Noop, registry
from bench.runs import dispatch
from caravel import ConcurrencyLimit, DatabaseQueue, DispatchOptions
from caravel.store.protocol import ClaimRequest

LEASE_MS = 60_000


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _one(
    url: str, fair: bool, backlog: int, jobs: int, batch: int, rounds: int
) -> dict[str, Any]:
    async with DatabaseQueue(url, registry) as queue:
        for start in range(0, backlog, 1000):
            await queue.enqueue_many(
                [(Noop(i), dispatch()) for i in range(start, min(backlog, start + 1000))]
            )
        if fair:
            await queue.set_queue_limit(ConcurrencyLimit(queue=QUEUE, fair=True))
        store, clock = queue.store, queue.clock
        small = DispatchOptions(queue=QUEUE, tenant_id="small")
        enqueued: dict[Any, tuple[float, int]] = {}
        waits_ms: list[float] = []
        waits_rounds: list[float] = []
        claim_ms: list[float] = []
        for round_ in range(rounds):
            if len(enqueued) < jobs:
                job_id = (await queue.enqueue(Noop(-1), small)).job_id
                enqueued[job_id] = (time.perf_counter(), round_)
            request = ClaimRequest(QUEUE, batch, clock.now_ms(), LEASE_MS, "ready", limited=fair)
            started = time.perf_counter()
            claimed = (await store.job_claim_many(request)).claimed
            now = time.perf_counter()
            claim_ms.append((now - started) * 1000)
            for job in claimed:
                if job.lease.job_id in enqueued:
                    at, then = enqueued[job.lease.job_id]
                    waits_ms.append((now - at) * 1000)
                    waits_rounds.append(round_ - then + 1)
            if claimed:
                await store.job_complete_many([job.lease for job in claimed], clock.now_ms())
            if len(waits_ms) == jobs or not claimed:
                break
    return {
        "b_started": len(waits_ms),
        "b_not_started": jobs - len(waits_ms),
        "claims": len(claim_ms),
        "b_wait_ms_p50": _percentile(waits_ms, 0.5),
        "b_wait_ms_p99": _percentile(waits_ms, 0.99),
        "b_wait_rounds_p50": _percentile(waits_rounds, 0.5),
        "b_wait_rounds_p99": _percentile(waits_rounds, 0.99),
        "claim_ms_p50": _percentile(claim_ms, 0.5),
        "claim_ms_p99": _percentile(claim_ms, 0.99),
        "claim_ms_mean": statistics.fmean(claim_ms) if claim_ms else None,
    }


async def fairness(
    fair_url: str, plain_url: str, backlog: int, jobs: int, batch: int, rounds: int | None
) -> dict[str, Any]:
    """B's waits with fairness on (in ``fair_url``) and off (in ``plain_url``)."""
    limit = rounds if rounds is not None else backlog // batch + jobs + 1
    figures: dict[str, Any] = {"backlog": backlog, "jobs": jobs, "batch": batch}
    for name, url, fair in (("on", fair_url, True), ("off", plain_url, False)):
        measured = await _one(url, fair, backlog, jobs, batch, limit)
        figures.update({f"{key}_{name}": value for key, value in measured.items()})
    return figures
