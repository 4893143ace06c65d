"""A handler completing its job in its own transaction (``ctx.complete_in``) on every SQL
database: its writes and the completion commit together, a chain's next step is released in
that transaction, a lost lease rolls the handler's writes back, and an attempt whose
transaction never committed is retried, never completed twice."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from caravel import (
    AttemptOutcome,
    JobContext,
    JobRegistry,
    JobState,
    LeaseLostError,
    QueueWorker,
    RetryPolicy,
    ValidationError,
    WorkerOptions,
)
from caravel.clock import SystemClock
from caravel.limits import HELD_DUE_AT
from caravel.queue import DatabaseQueue
from caravel.store.schema import jobs
from caravel.store.urls import async_url, sync_url
from caravel.testing import ManualClock, drain
from tests.support import LEASE, SteppingClock, dispatch, open_queue, until_watching, within
from tests.support.databases import dbapi_connection

EFFECTS = sa.table("app_effects", sa.column("job_id", sa.String), sa.column("note", sa.String))


@dataclasses.dataclass(frozen=True)
class Pay:
    note: str = ""


@pytest.fixture
def app_engine(db_url: str) -> Iterator[sa.Engine]:
    """The application's own (blocking) engine on the queue's database, with its table."""
    engine = sa.create_engine(sync_url(db_url))
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS app_effects"))
        conn.execute(sa.text("CREATE TABLE app_effects (job_id VARCHAR(36), note VARCHAR(40))"))
    yield engine
    engine.dispose()


@pytest.fixture
async def app_async(db_url: str, app_engine: sa.Engine) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(async_url(db_url))
    yield engine
    await engine.dispose()


def effects(engine: sa.Engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(EFFECTS.c.job_id, EFFECTS.c.note)).all()
    return sorted((str(row[0]), str(row[1])) for row in rows)


async def write_and_complete(session: AsyncSession, ctx: JobContext[Any]) -> None:
    """The handlers' effect, and the job's completion in its transaction."""
    await session.execute(EFFECTS.insert().values(job_id=str(ctx.job_id), note="x"))
    await ctx.complete_in(session)


def registry_with(handler: Any, retry: RetryPolicy | None = None) -> JobRegistry:
    registry = JobRegistry()
    registry.register("tests.pay.v1", Pay, handler, retry=retry)
    return registry


async def state_of(queue: DatabaseQueue, job_id: UUID) -> JobState:
    status = await queue.get_status(job_id, "default", "tenant-a")
    assert status is not None
    return status.state


async def test_the_effect_and_the_completion_commit_together(
    db_url: str, app_engine: sa.Engine, app_async: AsyncEngine
) -> None:
    async def handle(job: Pay, ctx: JobContext[Any]) -> str:
        async with AsyncSession(app_async) as session, session.begin():
            await session.execute(EFFECTS.insert().values(job_id=str(ctx.job_id), note=job.note))
            await ctx.complete_in(session, result={"paid": job.note})
        return "ignored: the completion stored its own result"

    async with open_queue(db_url, registry_with(handle), clock=ManualClock()) as queue:
        made = await queue.enqueue(Pay("a"), dispatch())
        plain = await queue.enqueue(Pay("plain"), dispatch(queue="plain"))
        runs = await drain(queue, queues=["default"])
        assert [(run.job_id, run.outcome) for run in runs] == [(made.job_id, "completed")]
        assert await state_of(queue, made.job_id) is JobState.COMPLETED
        assert await queue.get_result(made.job_id, "default", "tenant-a") == {"paid": "a"}
        assert effects(app_engine) == [(str(made.job_id), "a")]

        # The history reads as a completion by the worker does, field for field.
        async def returns(job: Pay, ctx: JobContext[Any]) -> None:
            return None

        queue.registry = registry_with(returns)
        async with QueueWorker(queue) as worker:
            assert await worker.run_once("plain") is True
        (joined,) = await queue.get_attempts(made.job_id, "default", "tenant-a") or []
        (normal,) = await queue.get_attempts(plain.job_id, "plain", "tenant-a") or []
    assert joined.outcome is normal.outcome is AttemptOutcome.COMPLETED
    assert (joined.host, joined.pid) == (normal.host, normal.pid)
    assert (joined.category, joined.error_class, joined.detail, joined.retry_at) == (
        None,
        None,
        None,
        None,
    )
    assert joined.lease_token == 1
    assert joined.finished_at is not None


async def test_a_chain_step_releases_the_next_in_its_transaction(
    db_url: str, app_engine: sa.Engine, app_async: AsyncEngine
) -> None:
    seen: list[Any] = []
    peeks: list[bool] = []

    async def handle(job: Pay, ctx: JobContext[Any]) -> None:
        seen.append(ctx.previous_result)
        async with AsyncSession(app_async) as session, session.begin():
            await session.execute(EFFECTS.insert().values(job_id=str(ctx.job_id), note=job.note))
            await ctx.complete_in(session, result={"step": job.note})
            if job.note == "1":
                # Inside the transaction the next step is released already...
                due = await session.execute(sa.select(jobs.c.due_at).where(jobs.c.id == nxt[0]))
                peeks.append(due.scalar_one() != HELD_DUE_AT)

    nxt: list[UUID] = []
    async with open_queue(db_url, registry_with(handle), clock=ManualClock()) as queue:
        made = await queue.enqueue_chain([(Pay(str(n)), dispatch()) for n in (1, 2)])
        nxt.append(made.job_ids[1])
        runs = await drain(queue, advance=True)
        assert [run.outcome for run in runs] == ["completed", "completed"]
        chain = await queue.get_chain(made.chain_id, "tenant-a")
        assert chain is not None
        assert chain.state == "completed"
    assert peeks == [True]
    assert seen == [None, {"step": "1"}]
    assert sorted(note for _, note in effects(app_engine)) == ["1", "2"]


async def test_a_dbapi_connection_completes_a_batch_and_releases_its_callback(
    db_url: str, app_engine: sa.Engine
) -> None:
    """A bare DB-API connection of the application's (psycopg, PyMySQL, sqlite3): the
    completion and the release of the batch's callback are made on it, by name."""
    handed: list[Any] = []

    def handle(job: Pay, ctx: JobContext[Any]) -> None:
        if ctx.batch is not None:
            handed.append((ctx.batch.total, ctx.batch.completed))
            return
        raw = dbapi_connection(db_url)
        try:
            ctx.complete_in_sync(raw, result=job.note)
            raw.commit()
        finally:
            raw.close()

    async with open_queue(db_url, registry_with(handle), clock=ManualClock()) as queue:
        made = await queue.enqueue_batch(
            [(Pay(str(n)), dispatch()) for n in (1, 2)], callback=(Pay("cb"), dispatch())
        )
        runs = await drain(queue, advance=True)
        assert [run.outcome for run in runs] == ["completed"] * 3
        assert await queue.get_result(made.job_ids[0], "default", "tenant-a") == "1"
    assert handed == [(2, 2)]


async def test_a_lost_lease_raises_and_the_handlers_writes_roll_back(
    db_url: str, app_engine: sa.Engine, app_async: AsyncEngine
) -> None:
    raised: list[BaseException] = []

    async def handle(job: Pay, ctx: JobContext[Any]) -> None:
        # Another worker took the job over: its claim moved the lease token on.
        async with app_async.begin() as conn:
            await conn.execute(
                jobs.update()
                .where(jobs.c.id == ctx.job_id)
                .values(lease_token=jobs.c.lease_token + 1)
            )
        try:
            async with AsyncSession(app_async) as session, session.begin():
                await session.execute(EFFECTS.insert().values(job_id=str(ctx.job_id), note="x"))
                await ctx.complete_in(session)
        except LeaseLostError as exc:
            raised.append(exc)
            raise

    async with open_queue(db_url, registry_with(handle), clock=ManualClock()) as queue:
        made = await queue.enqueue(Pay(), dispatch())
        async with QueueWorker(queue) as worker:
            step = await worker.step("default")
        assert step is not None
        assert step.outcome is not None
        assert step.held is False  # the failure is fenced off too: the job is not ours
        assert await state_of(queue, made.job_id) is JobState.RUNNING
    assert [type(exc) for exc in raised] == [LeaseLostError]
    assert effects(app_engine) == []


async def test_a_rollback_after_completing_retries_the_job_once(
    db_url: str, app_engine: sa.Engine, app_async: AsyncEngine
) -> None:
    tries: list[int] = []

    async def handle(job: Pay, ctx: JobContext[Any]) -> str:
        tries.append(ctx.attempt)
        async with AsyncSession(app_async) as session:
            await session.execute(EFFECTS.insert().values(job_id=str(ctx.job_id), note="x"))
            await ctx.complete_in(session, result=ctx.attempt)
            if ctx.attempt == 1:
                await session.rollback()  # say the application changed its mind
            else:
                await session.commit()
        return "the return value does not count"

    async with open_queue(db_url, registry_with(handle), clock=ManualClock()) as queue:
        made = await queue.enqueue(Pay(), dispatch(max_attempts=3))
        runs = await drain(queue, advance=True)
        assert [(run.outcome, run.failure) for run in runs] == [
            ("retrying", "CompletionNotCommitted"),
            ("completed", None),
        ]
        assert await queue.get_result(made.job_id, "default", "tenant-a") == 2
        history = await queue.get_attempts(made.job_id, "default", "tenant-a") or []
    assert [(r.outcome, r.category) for r in history] == [
        (AttemptOutcome.FAILED, "CompletionNotCommitted"),
        (AttemptOutcome.COMPLETED, None),
    ]
    assert tries == [1, 2]
    assert effects(app_engine) == [(str(made.job_id), "x")]


async def test_raising_after_a_committed_completion_changes_nothing(
    db_url: str, app_engine: sa.Engine, app_async: AsyncEngine
) -> None:
    async def handle(job: Pay, ctx: JobContext[Any]) -> None:
        async with AsyncSession(app_async) as session, session.begin():
            await write_and_complete(session, ctx)
        raise RuntimeError("after the commit")

    async with open_queue(db_url, registry_with(handle), clock=ManualClock()) as queue:
        made = await queue.enqueue(Pay(), dispatch())
        runs = await drain(queue, advance=True)
        assert [run.outcome for run in runs] == ["completed"]
        assert await state_of(queue, made.job_id) is JobState.COMPLETED


async def test_running_on_after_the_commit_ends_at_the_next_renewal_as_a_success(
    db_url: str, app_engine: sa.Engine, app_async: AsyncEngine
) -> None:
    """Once the commit finished the job, the lease's next renewal is refused and the watchdog
    cancels the handler: the attempt is still the completion it committed."""
    clock = SteppingClock()
    committed, cancelled = asyncio.Event(), asyncio.Event()

    async def handle(job: Pay, ctx: JobContext[Any]) -> None:
        async with AsyncSession(app_async) as session, session.begin():
            await write_and_complete(session, ctx)
        committed.set()
        try:
            await asyncio.Event().wait()  # more work after the commit
        finally:
            cancelled.set()

    async with open_queue(db_url, registry_with(handle), clock=clock) as queue:
        made = await queue.enqueue(Pay(), dispatch())
        async with QueueWorker(queue) as worker:
            task = asyncio.ensure_future(worker.step("default"))
            await within(committed.wait())
            await until_watching(clock, task)
            await clock.advance(LEASE)  # past the renewal, which is refused
            step = await within(task)
        assert cancelled.is_set()
        assert step is not None
        assert step.outcome is not None
        assert (step.outcome.committed, step.held, step.abandoned) == (True, True, None)
        assert await state_of(queue, made.job_id) is JobState.COMPLETED
        history = await queue.get_attempts(made.job_id, "default", "tenant-a") or []
        assert [r.outcome for r in history] == [AttemptOutcome.COMPLETED]


async def test_raising_inside_the_transaction_fails_as_the_handler(
    db_url: str, app_engine: sa.Engine, app_async: AsyncEngine
) -> None:
    async def handle(job: Pay, ctx: JobContext[Any]) -> None:
        async with AsyncSession(app_async) as session, session.begin():
            await write_and_complete(session, ctx)
            if ctx.attempt == 1:
                raise RuntimeError("before the commit: the transaction rolls back")

    async with open_queue(db_url, registry_with(handle), clock=ManualClock()) as queue:
        await queue.enqueue(Pay(), dispatch(max_attempts=2))
        runs = await drain(queue, advance=True)
        assert [(run.outcome, run.failure) for run in runs] == [
            ("retrying", "HandlerFailed"),
            ("completed", None),
        ]
    assert len(effects(app_engine)) == 1


async def test_a_synchronous_handler_with_a_blocking_session(
    db_url: str, app_engine: sa.Engine
) -> None:
    def handle(job: Pay, ctx: JobContext[Any]) -> None:
        with Session(app_engine) as session, session.begin():
            session.execute(EFFECTS.insert().values(job_id=str(ctx.job_id), note=job.note))
            ctx.complete_in_sync(session, result=[1, 2])

    async with open_queue(db_url, registry_with(handle), clock=ManualClock()) as queue:
        made = await queue.enqueue(Pay("s"), dispatch())
        runs = await drain(queue, advance=True)
        assert [run.outcome for run in runs] == ["completed"]
        assert await queue.get_result(made.job_id, "default", "tenant-a") == [1, 2]
    assert effects(app_engine) == [(str(made.job_id), "s")]


async def test_a_result_that_breaks_the_rules_sends_nothing(
    db_url: str, app_engine: sa.Engine, app_async: AsyncEngine
) -> None:
    caught: list[ValidationError] = []

    async def handle(job: Pay, ctx: JobContext[Any]) -> None:
        async with AsyncSession(app_async) as session:
            for bad in ({1, 2}, "x" * 70_000):
                with pytest.raises(ValidationError) as error:
                    await ctx.complete_in(session, result=bad)
                caught.append(error.value)
            assert session.in_transaction() is False

    async with open_queue(db_url, registry_with(handle), clock=ManualClock()) as queue:
        await queue.enqueue(Pay(), dispatch())
        runs = await drain(queue, advance=True)
        assert [run.outcome for run in runs] == ["completed"]  # returned without completing
    assert [error.field for error in caught] == ["result", "result"]


async def test_on_the_event_loop_the_blocking_call_is_refused(
    db_url: str, app_engine: sa.Engine
) -> None:
    async def handle(job: Pay, ctx: JobContext[Any]) -> None:
        with Session(app_engine) as session:
            with pytest.raises(ValidationError) as error:
                ctx.complete_in_sync(session)
            assert error.value.field == "session"
            with session.begin():  # awaiting the async call with a blocking session works
                session.execute(EFFECTS.insert().values(job_id=str(ctx.job_id), note="x"))
                await ctx.complete_in(session)

    async with open_queue(db_url, registry_with(handle), clock=ManualClock()) as queue:
        await queue.enqueue(Pay(), dispatch())
        runs = await drain(queue, advance=True)
        assert [run.outcome for run in runs] == ["completed"]
    assert len(effects(app_engine)) == 1


async def test_concurrent_handlers_on_the_worker_do_not_block_each_other(
    db_url: str, app_engine: sa.Engine
) -> None:
    """Many synchronous handlers write and complete at once while the worker claims, renews
    and acknowledges on its own connections: on SQLite, one writer at a time, which the
    handlers' BEGIN IMMEDIATE makes wait its turn instead of failing or deadlocking."""
    if db_url.startswith("sqlite"):
        sa.event.listen(app_engine, "connect", _sqlite_autocommit_driver)
        sa.event.listen(app_engine, "begin", _begin_immediate)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    count = 12
    finished: list[str] = []

    def handle(job: Pay, ctx: JobContext[Any]) -> None:
        with Session(app_engine) as session, session.begin():
            # Read first, write after: in a deferred SQLite transaction another writer's
            # commit in between makes the write fail at once ("database is locked").
            mine = EFFECTS.c.job_id == str(ctx.job_id)
            if session.execute(sa.select(sa.func.count()).where(mine)).scalar_one() == 0:
                session.execute(EFFECTS.insert().values(job_id=str(ctx.job_id), note=job.note))
            ctx.complete_in_sync(session)
        finished.append(job.note)
        if len(finished) == count:
            loop.call_soon_threadsafe(done.set)

    async with open_queue(db_url, registry_with(handle), clock=SystemClock()) as queue:
        await queue.enqueue_many([(Pay(str(n)), dispatch()) for n in range(count)])
        options = WorkerOptions(concurrency=4, poll_interval=timedelta(milliseconds=50))
        worker = QueueWorker(queue, options=options)

        async with worker:
            task = asyncio.create_task(worker.run("default"))
            await asyncio.wait_for(done.wait(), 30)
            worker.stop()
            await task
        listed = await queue.store.job_list(_all())
        states = [row.state for row in listed]
        # Not one attempt failed on a lock: each job ran once.
        histories = [await queue.get_attempts(row.job_id, "default", "tenant-a") for row in listed]
    assert states == [JobState.COMPLETED] * count
    assert [[r.outcome for r in h or []] for h in histories] == [[AttemptOutcome.COMPLETED]] * count
    assert sorted(note for _, note in effects(app_engine)) == sorted(str(n) for n in range(count))


def _all() -> Any:
    from caravel.store.protocol import JobFilter

    return JobFilter(limit=100)


def _sqlite_autocommit_driver(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # SQLAlchemy sends BEGIN itself (see _begin_immediate)


def _begin_immediate(conn: sa.Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


async def test_memory_queues_have_no_transaction_to_join() -> None:
    caught: list[ValidationError] = []

    async def handle(job: Pay, ctx: JobContext[Any]) -> None:
        with pytest.raises(ValidationError) as error:
            await ctx.complete_in(object())
        caught.append(error.value)

    async with open_queue("memory://", registry_with(handle), clock=ManualClock()) as queue:
        await queue.enqueue(Pay(), dispatch())
        await drain(queue, advance=True)
    assert [error.field for error in caught] == ["session"]
    assert "memory://" in str(caught[0])
