"""The synchronous facade, on every database: the async queue's operations and guarantees from
code without an event loop, shared between threads, closed cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from caravel import (
    DatabaseQueue,
    IdempotencyConflictError,
    JobContext,
    JobProgress,
    JobRegistry,
    JobState,
    QueueOptions,
    QueueWorker,
    SyncQueue,
    SyncQueueError,
    ValidationError,
)
from caravel.testing import ManualClock
from tests.support import LEASE, Add, Recorder, Report, dispatch, make_registry

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sync_queue(db_url: str, clock: ManualClock) -> Iterator[SyncQueue]:
    queue = SyncQueue(
        db_url, make_registry(), options=QueueOptions(lease_duration=LEASE), clock=clock
    )
    with queue:
        yield queue


def test_enqueue_status_and_payload_without_an_event_loop(sync_queue: SyncQueue) -> None:
    result = sync_queue.enqueue(Add(3, note="n"), dispatch("k1"))
    assert result.already_enqueued is False
    status = sync_queue.get_status(result.job_id, "default", "tenant-a")
    assert status is not None
    assert status.state is JobState.READY
    assert status.job_type == "tests.add.v1"
    assert sync_queue.get_payload(result.job_id, "default", "tenant-a") == (
        '{"amount":3,"note":"n"}'
    )
    # Exact tenant matching, as on the async queue.
    assert sync_queue.get_status(result.job_id, "default", "tenant-b") is None


def test_idempotency_and_conflict_are_the_async_queues(sync_queue: SyncQueue) -> None:
    first = sync_queue.enqueue(Add(1), dispatch("k1"))
    again = sync_queue.enqueue(Add(1), dispatch("k1"))
    assert (again.job_id, again.already_enqueued) == (first.job_id, True)
    with pytest.raises(IdempotencyConflictError) as caught:
        sync_queue.enqueue(Add(2), dispatch("k1"))
    assert caught.value.job_id == first.job_id


def test_a_bad_job_in_a_batch_writes_nothing(sync_queue: SyncQueue) -> None:
    with pytest.raises(ValidationError) as caught:
        sync_queue.enqueue_many(
            [(Add(1), dispatch("a")), (Report(report_id="r"), dispatch(queue="bad queue!"))]
        )
    assert caught.value.field == "queue"
    assert sync_queue.enqueue(Add(1), dispatch("a")).already_enqueued is False


def test_enqueue_many_keeps_order_and_keys(sync_queue: SyncQueue) -> None:
    results = sync_queue.enqueue_many(
        [(Add(1), dispatch("a")), (Add(2), dispatch("b")), (Add(1), dispatch("a"))]
    )
    assert [r.already_enqueued for r in results] == [False, False, True]
    assert results[2].job_id == results[0].job_id


def test_replay_of_a_dead_letter(db_url: str, clock: ManualClock) -> None:
    recorder = Recorder()
    recorder.fail_amounts.add(9)
    queue = SyncQueue(
        db_url,
        make_registry(recorder),
        options=QueueOptions(lease_duration=LEASE, max_attempts=1),
        clock=clock,
    )
    job = queue.enqueue(Add(9), dispatch("dead"))
    worker = QueueWorker(queue.queue)
    # The worker's run_once, driven from synchronous code on the queue's own loop.
    assert queue.call(worker.run_once, "default") is True
    status = queue.get_status(job.job_id, "default", "tenant-a")
    assert status is not None
    assert status.state is JobState.DEAD_LETTER
    assert queue.replay(job.job_id, "default", "tenant-b") is False  # another tenant's
    assert queue.replay(job.job_id, "default", "tenant-a") is True
    replayed = queue.get_status(job.job_id, "default", "tenant-a")
    assert replayed is not None
    assert (replayed.state, replayed.attempt) == (JobState.READY, 0)
    queue.call(worker.close)
    queue.close()


def test_a_synchronous_handlers_progress_and_meta_read_back(
    db_url: str, clock: ManualClock
) -> None:
    def report(job: Add, ctx: JobContext[object]) -> dict[str, int]:
        ctx.progress(job.amount, 10, "counted")
        ctx.set_meta("amount", job.amount)
        return {"amount": job.amount}

    registry = JobRegistry()
    registry.register("tests.add.v1", Add, report)
    with SyncQueue(db_url, registry, clock=clock) as queue:
        job = queue.enqueue(Add(7), dispatch())
        before = queue.get_status(job.job_id, "default", "tenant-a")
        assert before is not None
        assert (before.progress, before.meta) == (None, {})
        worker = QueueWorker(queue.queue)
        assert queue.call(worker.run_once, "default") is True
        queue.call(worker.close)
        status = queue.get_status(job.job_id, "default", "tenant-a")
    assert status is not None
    assert status.state is JobState.COMPLETED
    assert status.progress == JobProgress(7, 10, "counted", clock.now())
    assert status.meta == {"amount": 7}


def test_threads_share_one_queue(sync_queue: SyncQueue) -> None:
    results: list[tuple[int, object]] = []
    errors: list[BaseException] = []

    def produce(thread: int) -> None:
        try:
            for i in range(25):
                # Every thread submits the same 25 keys: each key makes exactly one job.
                results.append((i, sync_queue.enqueue(Add(i), dispatch(f"key-{i}")).job_id))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    ids_by_key: dict[int, set[object]] = {}
    for i, job_id in results:
        ids_by_key.setdefault(i, set()).add(job_id)
    assert len(results) == 150
    assert all(len(ids) == 1 for ids in ids_by_key.values())


def test_calling_from_its_own_loop_is_refused(sync_queue: SyncQueue) -> None:
    async def nested() -> None:
        sync_queue.enqueue(Add(1), dispatch())

    with pytest.raises(SyncQueueError, match="its own event loop"):
        sync_queue.call(nested)


def test_closed_queue_refuses_calls(db_url: str) -> None:
    queue = SyncQueue(db_url, make_registry())
    queue.enqueue(Add(1), dispatch())
    queue.close()
    queue.close()  # again: nothing
    with pytest.raises(SyncQueueError, match="closed"):
        queue.enqueue(Add(1), dispatch())


def test_from_queue_shells_an_unused_async_queue(db_url: str) -> None:
    shell = SyncQueue.from_queue(DatabaseQueue(db_url, make_registry()))
    with shell:
        job = shell.enqueue(Add(5), dispatch("x"))
        assert shell.get_status(job.job_id, "default", "tenant-a") is not None


_EXIT_SCRIPT = """
import sys
from caravel import SyncQueue
from tests.support import Add, dispatch, make_registry

queue = SyncQueue(sys.argv[1], make_registry())
print(queue.enqueue(Add(1), dispatch()).job_id)
{ending}
"""


@pytest.mark.parametrize("ending", ["", "queue.close()", "raise SystemExit(3)"])
def test_interpreter_exit_leaves_nothing_pending(db_url: str, ending: str) -> None:
    """A queue left open (or closed, or interrupted by an exit) at interpreter exit: the
    process ends at once, with nothing on stderr (no pending task, no unclosed connection)."""
    script = textwrap.dedent(_EXIT_SCRIPT.format(ending=ending))
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "PYTHONWARNINGS": "d"}
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-c", script, db_url],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == (3 if "SystemExit" in ending else 0), done.stderr
    assert done.stderr == ""
    assert len(done.stdout.strip()) == 36


_FORK_SCRIPT = """
import os, sys
from caravel import SyncQueue, SyncQueueError
from tests.support import Add, dispatch, make_registry

unused = SyncQueue(sys.argv[1], make_registry())
used = SyncQueue(sys.argv[1], make_registry())
used.enqueue(Add(1), dispatch())
pid = os.fork()
if pid == 0:
    code = 0
    try:
        used.enqueue(Add(2), dispatch())
        code = 10
    except SyncQueueError:
        pass
    try:
        unused.enqueue(Add(3), dispatch())
        unused.close()
    except Exception:
        code = 11
    os._exit(code)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_a_queue_made_before_a_fork_works_in_the_child_only_if_unused(db_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [sys.executable, "-c", _FORK_SCRIPT, db_url],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
