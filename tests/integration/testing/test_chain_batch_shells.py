"""Chains and batches through the other facades, on every database: ``SyncQueue`` (with the
synchronous ``drain``) and ``ImmediateQueue``, which runs a chain's steps as each is released
and a batch's callback once its jobs have finished."""

from __future__ import annotations

from typing import Any

from caravel import BatchOutcome, DispatchOptions, JobContext, JobRegistry, SyncQueue
from caravel.testing import ImmediateQueue, ManualClock, drain
from tests.support import Add


class Seen:
    """A handler that records each run's amount, previous result and batch outcome, returns
    the amount times ten, and fails for a negative amount (while ``fail_negative``)."""

    def __init__(self) -> None:
        self.runs: list[tuple[int, Any, BatchOutcome | None]] = []
        self.fail_negative = True
        self.registry = JobRegistry()
        self.registry.register("tests.add.v1", Add, self.add)

    async def add(self, job: Add, ctx: JobContext[Any]) -> int:
        self.runs.append((job.amount, ctx.previous_result, ctx.batch))
        if job.amount < 0 and self.fail_negative:
            raise LookupError("not shown")
        return job.amount * 10


def _on(queue: str, attempts: int = 1) -> DispatchOptions:
    return DispatchOptions(queue=queue, max_attempts=attempts)


def test_a_sync_queue_enqueues_chains_and_batches(db_url: str) -> None:
    seen = Seen()
    with SyncQueue(db_url, seen.registry, clock=ManualClock()) as queue:
        chain = queue.enqueue_chain([(Add(1), _on("a")), (Add(2), _on("b"))])
        before = queue.get_chain(chain.chain_id)
        assert before is not None
        assert before.state == "running"
        assert [step.held for step in before.steps] == [False, True]
        batch = queue.enqueue_batch(
            [(Add(3), _on("a")), (Add(-4), _on("a"))], callback=(Add(5), _on("c"))
        )
        drain(queue)
        after = queue.get_chain(chain.chain_id)
        assert after is not None
        assert after.state == "completed"
        status = queue.get_batch(batch.batch_id)
        assert status is not None
        assert (status.total, status.pending, status.completed, status.failed) == (2, 0, 1, 1)
    assert (2, 10, None) in seen.runs
    (callback,) = [run for run in seen.runs if run[0] == 5]
    assert callback[2] == BatchOutcome(batch.batch_id, total=2, completed=1, failed=1, cancelled=0)


async def test_an_immediate_queue_runs_a_chain_across_queues_before_returning(db_url: str) -> None:
    seen = Seen()
    async with ImmediateQueue(seen.registry, target=db_url) as queue:
        # "b" sorts before "c": the third step is released in a queue already passed once.
        chain = await queue.enqueue_chain(
            [(Add(1), _on("c")), (Add(2), _on("b")), (Add(3), _on("a"))]
        )
        status = await queue.get_chain(chain.chain_id)
    assert status is not None
    assert status.state == "completed"
    assert [(amount, previous) for amount, previous, _ in seen.runs] == [
        (1, None),
        (2, 10),
        (3, 20),
    ]


async def test_an_immediate_queue_runs_a_batch_and_then_its_callback(db_url: str) -> None:
    seen = Seen()
    async with ImmediateQueue(seen.registry, target=db_url, failures="record") as queue:
        batch = await queue.enqueue_batch(
            [(Add(1), _on("z")), (Add(-2), _on("z"))], callback=(Add(9), _on("a"))
        )
        status = await queue.get_batch(batch.batch_id)
    assert status is not None
    assert status.finished
    assert seen.runs[-1] == (
        9,
        None,
        BatchOutcome(batch.batch_id, total=2, completed=1, failed=1, cancelled=0),
    )


async def test_an_immediate_replay_runs_the_steps_it_releases_in_other_queues(
    db_url: str,
) -> None:
    seen = Seen()
    async with ImmediateQueue(seen.registry, target=db_url, failures="record") as queue:
        chain = await queue.enqueue_chain([(Add(-1), _on("z")), (Add(2), _on("a"))])
        stopped = await queue.get_chain(chain.chain_id)
        assert stopped is not None
        assert stopped.state == "stopped"

        seen.fail_negative = False  # the fault is fixed; the dead letter is replayed
        assert await queue.replay(chain.job_ids[0], "z")
        resumed = await queue.get_chain(chain.chain_id)
    assert resumed is not None
    assert resumed.state == "completed"
    assert seen.runs == [(-1, None, None), (-1, None, None), (2, -10, None)]
