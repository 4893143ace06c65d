"""A batch whose last member's worker dies between the handler and the acknowledgement, on
PostgreSQL and SQLite, with real worker processes.

The worker running the last member is SIGKILLed at the ``after_handler_before_ack`` failpoint:
the handler's effect is written, but the completion (and with it the batch's last count) is not.
The batch stays unfinished and its callback held. A second worker takes the member over once
its lease expires, finds the effect, completes it; that completion finishes the batch and
releases the callback in the same transaction, and the callback runs exactly once, handed the
right counts.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from uuid import UUID

import pytest

from caravel import DatabaseQueue, DispatchOptions, QueueOptions
from caravel.batches import BatchStatus
from tests.faults.effects_app import BatchDone
from tests.faults.harness import (
    QUEUE,
    TENANT,
    Effect,
    check,
    job_rows,
    read_effects,
    read_ledger,
    registry,
    start_worker,
    wait_until,
)

pytestmark = pytest.mark.slow

LEASE = 1.0
LAST = "faults-last"
CALLBACKS = "faults-callbacks"


def _on(queue: str) -> DispatchOptions:
    return DispatchOptions(queue=queue, tenant_id=TENANT, max_attempts=3)


def _enqueue(queue_url: str) -> tuple[UUID, list[str], str]:
    """Two members on the workers' usual queue, the last on a queue of its own (so the test
    decides which member is last), and the callback on a third."""

    async def go() -> tuple[UUID, list[str], str]:
        queue = DatabaseQueue(queue_url, registry, options=QueueOptions(max_attempts=3))
        try:
            made = await queue.enqueue_batch(
                [
                    (Effect(value=0), _on(QUEUE)),
                    (Effect(value=1), _on(QUEUE)),
                    (Effect(value=2), _on(LAST)),
                ],
                callback=(BatchDone("all"), _on(CALLBACKS)),
            )
        finally:
            await queue.close()
        assert made.callback_id is not None
        return made.batch_id, [str(i) for i in made.job_ids], str(made.callback_id)

    return asyncio.run(go())


def _batch(queue_url: str, batch_id: UUID) -> BatchStatus:
    async def go() -> BatchStatus:
        queue = DatabaseQueue(queue_url, registry)
        try:
            got = await queue.get_batch(batch_id, TENANT)
        finally:
            await queue.close()
        assert got is not None
        return got

    return asyncio.run(go())


def _states(queue_url: str, ids: list[str]) -> list[tuple[str, int]]:
    rows = job_rows(queue_url)
    return [(rows[i].state, rows[i].attempt) for i in ids]


def test_a_crash_before_the_last_ack_still_runs_the_callback_once(
    db_url: str, app_url: str, logs: Path
) -> None:
    batch_id, members, callback = _enqueue(db_url)
    first, second, last = members

    clean = start_worker(db_url, app_url, logs / "clean.log", lease_duration=LEASE)
    try:
        wait_until(
            lambda: _states(db_url, [first, second]) == [("completed", 1)] * 2,
            timeout=30,
            what="the first two members to complete",
        )
    finally:
        assert clean.terminate() == 0, clean.log()
    before = _batch(db_url, batch_id)
    assert (before.completed, before.pending, before.finished_at) == (2, 1, None)

    crashing = start_worker(
        db_url,
        app_url,
        logs / "crashing.log",
        queues=(LAST, CALLBACKS),
        lease_duration=LEASE,
        failpoint="after_handler_before_ack",
    )
    try:
        code = crashing.wait(timeout=30)
    finally:
        crashing.kill()
    assert code == -signal.SIGKILL, crashing.log()

    # The handler ran and wrote its effect; nothing of its completion reached the queue.
    assert _states(db_url, [last, callback]) == [("running", 1), ("ready", 0)]
    assert [(e.job_id, e.event) for e in read_ledger(app_url) if e.job_id == last] == [
        (last, "start"),
        (last, "end"),
    ]
    crashed = _batch(db_url, batch_id)
    assert (crashed.completed, crashed.pending, crashed.finished_at) == (2, 1, None)

    takeover = start_worker(
        db_url, app_url, logs / "takeover.log", queues=(LAST, CALLBACKS), lease_duration=LEASE
    )
    try:
        wait_until(
            lambda: _states(db_url, [last, callback]) == [("completed", 2), ("completed", 1)],
            timeout=30,
            what="the takeover to complete the last member and run the callback",
        )
    finally:
        assert takeover.terminate() == 0, takeover.log()

    figures = check(
        db_url, app_url, [*members, callback], logs=[takeover.log()], lease_seconds=LEASE
    )
    assert figures.completed == 4
    assert figures.rejected_acks == 0
    runs = [(e.event, e.attempt) for e in read_ledger(app_url) if e.job_id == callback]
    assert runs == [("start", 1), ("end", 1)]
    handed = read_effects(app_url)[callback]["batch"]
    assert handed == {
        "batch_id": str(batch_id),
        "total": 3,
        "completed": 3,
        "failed": 0,
        "cancelled": 0,
    }
    # The member's re-run found attempt 1's effect and left it alone.
    assert read_effects(app_url)[last]["attempt"] == 1
    done = _batch(db_url, batch_id)
    assert (done.total, done.completed, done.failed, done.cancelled, done.pending) == (
        3,
        3,
        0,
        0,
        0,
    )
    assert done.finished
    assert done.finished_at is not None
