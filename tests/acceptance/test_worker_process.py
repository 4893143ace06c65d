"""``caravel worker`` as a real process on a real database: signals, exit codes, leases,
renewal, concurrency and competing workers."""

from __future__ import annotations

import asyncio
import re
import signal
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from caravel import DatabaseQueue, DispatchOptions, JobState, JobStatus
from tests.support.apps.workload import Nap, Spin, registry
from tests.support.databases import SqliteTemplate, create_pg_database, drop_pg_database
from tests.support.processes import WorkerProcess, read_ledger, wait_until

pytestmark = pytest.mark.slow

QUEUE = "naps"


def enqueue(url: str, *jobs: object) -> list[str]:
    async def go() -> list[str]:
        async with DatabaseQueue(url, registry) as queue:
            results = await queue.enqueue_many(
                [(job, DispatchOptions(queue=QUEUE, tenant_id="t")) for job in jobs]
            )
            return [str(r.job_id) for r in results]

    return asyncio.run(go())


def statuses(url: str, ids: list[str]) -> list[JobStatus]:
    async def go() -> list[JobStatus]:
        async with DatabaseQueue(url, registry) as queue:
            found = [await queue.get_status(job_id, QUEUE, "t") for job_id in ids]
        return [s for s in found if s is not None]

    return asyncio.run(go())


def started(evidence: Path, job_id: str, attempt: int = 1) -> bool:
    return any(
        e.kind == "start" and e.job_id == job_id and e.attempt == attempt
        for e in read_ledger(evidence)
    )


def completed(url: str, ids: list[str]) -> bool:
    """Every job of the test queue is completed (the queue holds only this test's jobs)."""

    async def go() -> bool:
        async with DatabaseQueue(url, registry) as queue:
            counts = await queue.store.queue_counts(QUEUE, queue.clock.now_ms())
        return bool(counts) and counts[0].completed == len(ids)

    return asyncio.run(go())


@pytest.fixture
def evidence(tmp_path: Path) -> Path:
    directory = tmp_path / "evidence"
    directory.mkdir()
    return directory


FAST = ("--poll-interval", "0.05")


def test_sigterm_mid_job_exits_zero_without_ack_and_another_worker_recovers_it(
    db_url: str, evidence: Path
) -> None:
    (job_id,) = enqueue(db_url, Nap(60, first_attempt_only=True))
    first = WorkerProcess(
        db_url, evidence, [QUEUE], "--lease-duration", "1", "--shutdown-grace", "0", *FAST
    )
    try:
        wait_until(lambda: started(evidence, job_id), what="the job to start")
        first.signal(signal.SIGTERM)
        code, err = first.wait()
        assert code == 0, err
    finally:
        first.kill()
    (status,) = statuses(db_url, [job_id])
    assert status.state is JobState.RUNNING
    assert status.attempt == 1

    second = WorkerProcess(db_url, evidence, [QUEUE], "--lease-duration", "1", *FAST)
    try:
        wait_until(lambda: completed(db_url, [job_id]), what="recovery by the second worker")
        second.signal(signal.SIGTERM)
        assert second.wait()[0] == 0
    finally:
        second.kill()
    runs = [e for e in read_ledger(evidence) if e.job_id == job_id]
    assert [(e.kind, e.attempt) for e in runs] == [("start", 1), ("start", 2), ("end", 2)]
    (status,) = statuses(db_url, [job_id])
    assert status.attempt == 2


def test_sigterm_with_grace_lets_the_job_finish_and_be_acknowledged(
    db_url: str, evidence: Path
) -> None:
    (job_id,) = enqueue(db_url, Nap(1.0))
    worker = WorkerProcess(db_url, evidence, [QUEUE], "--shutdown-grace", "30", *FAST)
    try:
        wait_until(lambda: started(evidence, job_id), what="the job to start")
        worker.signal(signal.SIGTERM)
        code, err = worker.wait()
    finally:
        worker.kill()
    assert code == 0, err
    (status,) = statuses(db_url, [job_id])
    assert status.state is JobState.COMPLETED
    assert status.attempt == 1


def test_second_signal_cancels_in_flight_jobs_at_once(db_url: str, evidence: Path) -> None:
    (job_id,) = enqueue(db_url, Nap(120))
    worker = WorkerProcess(db_url, evidence, [QUEUE], "--shutdown-grace", "600", *FAST)
    try:
        wait_until(lambda: started(evidence, job_id), what="the job to start")
        worker.signal(signal.SIGTERM)
        worker.signal(signal.SIGINT)
        code, err = worker.wait(timeout=20)
    finally:
        worker.kill()
    assert code == 0, err
    (status,) = statuses(db_url, [job_id])
    assert status.state is JobState.RUNNING  # not acknowledged
    assert not any(e.kind == "end" for e in read_ledger(evidence))


def test_unmigrated_database_exits_2_naming_the_upgrade_command(
    backend: str, tmp_path: Path, evidence: Path
) -> None:
    if backend == "sqlite":
        path = tmp_path / "empty.db"
        path.touch()
        url, cleanup = f"sqlite:///{path}", None
    else:
        url = create_pg_database()
        cleanup = url
    try:
        worker = WorkerProcess(url, evidence, [QUEUE], *FAST)
        code, err = worker.wait()
    finally:
        if cleanup:
            drop_pg_database(cleanup)
    assert code == 2, err  # configuration: restarting cannot help until it is migrated
    assert "caravel db upgrade" in err
    assert "processing" not in err


def terminate_worker_sessions(pg_url: str) -> None:
    """Wait until the worker holds its connections (a pooled one and the listener), then
    terminate them all, as an administrator or a server shutting down does."""
    database = make_url(pg_url).database
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as admin:

        def connected() -> bool:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                "AND application_name = 'caravel' AND pid <> pg_backend_pid()",
                (database,),
            ).fetchone()
            return row is not None and row[0] >= 2  # a pooled connection and the listener

        wait_until(connected, what="the worker to connect")
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND application_name = 'caravel' AND pid <> pg_backend_pid()",
            (database,),
        )


def test_worker_whose_postgres_sessions_are_terminated_reconnects_and_goes_on(
    pg_url: str, evidence: Path
) -> None:
    """A terminated session is an outage (``57P01``): within its window (30 s by default) the
    worker reconnects and carries on, and exits 0 when stopped."""
    worker = WorkerProcess(pg_url, evidence, [QUEUE], *FAST)
    try:
        terminate_worker_sessions(pg_url)
        ids = enqueue(pg_url, Nap(0))
        wait_until(lambda: completed(pg_url, ids), what="a job enqueued after the terminations")
        worker.signal(signal.SIGTERM)
        code, err = worker.wait()
    finally:
        worker.kill()
    assert code == 0, err
    assert "worker stopping" not in err


def test_worker_whose_postgres_sessions_are_terminated_exits_1_without_an_outage_window(
    pg_url: str, evidence: Path
) -> None:
    worker = WorkerProcess(pg_url, evidence, [QUEUE], *FAST, "--outage-window", "0")
    try:
        terminate_worker_sessions(pg_url)
        code, err = worker.wait()
    finally:
        worker.kill()
    assert code == 1, err
    assert "database error" in err


def test_worker_whose_sqlite_file_is_removed_exits_1(
    sqlite_template: SqliteTemplate, tmp_path: Path, evidence: Path
) -> None:
    db_url = sqlite_template.copy_to(tmp_path / "queue.db")
    path = tmp_path / "queue.db"
    (job_id,) = enqueue(db_url, Nap(0))
    worker = WorkerProcess(db_url, evidence, [QUEUE], *FAST)
    try:
        # Once a job has been claimed and acknowledged the worker's connections are open, and
        # open connections go on working on a file unlinked under them: the worker must still
        # notice that the queue is gone.
        wait_until(lambda: completed(db_url, [job_id]), what="the worker to finish a job")
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        code, err = worker.wait()
    finally:
        worker.kill()
    assert code == 1, err
    assert not path.exists()  # the queue never creates a database by itself


def test_renewal_keeps_a_job_running_three_lease_durations_on_one_worker(
    db_url: str, evidence: Path
) -> None:
    (job_id,) = enqueue(db_url, Nap(3.5))
    args = ("--lease-duration", "1", "--lease-renewal-interval", "0.25", *FAST)
    workers = [WorkerProcess(db_url, evidence, [QUEUE], *args) for _ in range(2)]
    try:
        wait_until(lambda: completed(db_url, [job_id]), what="the long job to complete")
    finally:
        for worker in workers:
            worker.signal(signal.SIGTERM)
        for worker in workers:
            worker.wait()
    runs = [(e.kind, e.attempt) for e in read_ledger(evidence) if e.job_id == job_id]
    assert runs == [("start", 1), ("end", 1)]
    (status,) = statuses(db_url, [job_id])
    assert status.attempt == 1


def test_without_renewal_a_job_is_cancelled_at_lease_expiry_and_retried(
    db_url: str, evidence: Path
) -> None:
    (job_id,) = enqueue(db_url, Nap(2.5, first_attempt_only=True))
    worker = WorkerProcess(db_url, evidence, [QUEUE], "--lease-duration", "1", *FAST)
    try:
        wait_until(lambda: completed(db_url, [job_id]), what="the retried job to complete")
    finally:
        worker.signal(signal.SIGTERM)
        worker.wait()
    runs = [(e.kind, e.attempt) for e in read_ledger(evidence) if e.job_id == job_id]
    assert runs == [("start", 1), ("start", 2), ("end", 2)]


def test_max_lease_lifetime_cancels_a_handler_that_keeps_renewing(
    db_url: str, evidence: Path
) -> None:
    (job_id,) = enqueue(db_url, Nap(60, first_attempt_only=True))
    args = (
        "--lease-duration",
        "1",
        "--lease-renewal-interval",
        "0.2",
        "--max-lease-lifetime",
        "2",
        *FAST,
    )
    worker = WorkerProcess(db_url, evidence, [QUEUE], *args)
    try:
        wait_until(lambda: completed(db_url, [job_id]), what="the job to be retried")
    finally:
        worker.signal(signal.SIGTERM)
        worker.wait()
    runs = [e for e in read_ledger(evidence) if e.job_id == job_id]
    assert [(e.kind, e.attempt) for e in runs] == [("start", 1), ("start", 2), ("end", 2)]
    # Renewed well past one lease (1 s), then stopped at the 2 s lifetime counted from the claim.
    assert 1.5 <= runs[1].at - runs[0].at < 10


def test_sync_cpu_bound_handler_keeps_its_lease_with_renewal(db_url: str, evidence: Path) -> None:
    # Three lease durations of CPU-bound work; the 2 s lease leaves room for a loaded machine,
    # renewal runs every 0.25 s from the event loop while the handler's thread holds the CPU.
    (job_id,) = enqueue(db_url, Spin(6.2))
    args = ("--lease-duration", "2", "--lease-renewal-interval", "0.25", *FAST)
    workers = [WorkerProcess(db_url, evidence, [QUEUE], *args) for _ in range(2)]
    try:
        wait_until(lambda: completed(db_url, [job_id]), what="the CPU-bound job to complete")
    finally:
        for worker in workers:
            worker.signal(signal.SIGTERM)
        for worker in workers:
            worker.wait()
    runs = [(e.kind, e.attempt) for e in read_ledger(evidence) if e.job_id == job_id]
    assert runs == [("start", 1), ("end", 1)]


def test_concurrency_runs_eight_handlers_at_once(db_url: str, evidence: Path) -> None:
    ids = enqueue(db_url, *(Nap(2.0, label=str(i)) for i in range(8)))
    worker = WorkerProcess(db_url, evidence, [QUEUE], "--concurrency", "8", *FAST)
    try:
        wait_until(lambda: completed(db_url, ids), what="eight jobs to complete")
    finally:
        worker.signal(signal.SIGTERM)
        worker.wait()
    events = read_ledger(evidence)
    starts = {e.job_id: e.at for e in events if e.kind == "start"}
    ends = {e.job_id: e.at for e in events if e.kind == "end"}
    assert set(starts) == set(ids)
    # Every handler started before any handler ended: all eight overlapped.
    assert max(starts.values()) < min(ends.values())


def test_four_worker_processes_drain_two_thousand_jobs_exactly_once(
    db_url: str, evidence: Path
) -> None:
    ids = enqueue(db_url, *(Nap(0, label=str(i)) for i in range(2000)))
    workers = [
        WorkerProcess(db_url, evidence, [QUEUE], "--concurrency", "4", *FAST) for _ in range(4)
    ]
    try:
        wait_until(lambda: completed(db_url, ids), timeout=180, what="2,000 jobs to complete")
    finally:
        for worker in workers:
            worker.signal(signal.SIGTERM)
        codes = [worker.wait()[0] for worker in workers]
    assert codes == [0, 0, 0, 0]
    events = read_ledger(evidence)
    starts = Counter(e.job_id for e in events if e.kind == "start")
    ends = Counter(e.job_id for e in events if e.kind == "end")
    assert set(starts) == set(ids)
    assert set(starts.values()) == {1}
    assert set(ends.values()) == {1}
    assert {s.attempt for s in statuses(db_url, ids)} == {1}
    assert len({e.pid for e in events}) >= 2  # the work really was shared


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_worker_over_four_queues_drains_them_within_its_concurrency(
    db_url: str, evidence: Path, concurrency: int
) -> None:
    """Four queues' fetchers share the worker's slots: the worker neither stops itself nor runs
    more handlers at once than its concurrency (the handlers' own ledger says how many ran)."""

    async def fill() -> list[str]:
        async with DatabaseQueue(db_url, registry) as queue:
            results = await queue.enqueue_many(
                [
                    (Nap(0.01, label=str(n)), DispatchOptions(queue=f"q{n % 4}", tenant_id="t"))
                    for n in range(40)
                ]
            )
        return [str(r.job_id) for r in results]

    ids = asyncio.run(fill())
    worker = WorkerProcess(
        db_url,
        evidence,
        ["q0", "q1", "q2", "q3"],
        "--concurrency",
        str(concurrency),
        *FAST,
    )
    try:
        wait_until(
            lambda: (
                sum(e.kind == "end" for e in read_ledger(evidence)) == len(ids)
                or worker.process.poll() is not None
            ),
            what="every job to finish",
        )
        assert worker.process.poll() is None, worker.wait()[1]
    finally:
        worker.signal()
        code, err = worker.wait()
    assert code == 0, err
    assert "worker stopping" not in err
    # At the default INFO level the worker says what it completed, per queue, in its summaries.
    summaries = re.findall(r"jobs finished in the last \d+ s: (\d+) completed.* queue=(q\d)", err)
    assert sum(int(n) for n, _ in summaries) == len(ids)
    assert {queue for _, queue in summaries} == {"q0", "q1", "q2", "q3"}
    events = read_ledger(evidence)
    assert sorted(e.job_id for e in events if e.kind == "end") == sorted(ids)
    running = highest = 0
    for event in events:
        running += 1 if event.kind == "start" else -1
        highest = max(highest, running)
    assert highest <= concurrency
