"""Test jobs and queue builders shared by the suites."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, TypeVar
from uuid import UUID

import pytest
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncEngine

from caravel import (
    ClaimedJob,
    DatabaseQueue,
    DispatchOptions,
    EnqueueResult,
    JobContext,
    JobRegistry,
    JobStatus,
    QueueInspector,
    QueueOptions,
)
from caravel.clock import Clock
from caravel.testing import ManualClock


@dataclasses.dataclass(frozen=True)
class Add:
    """A dataclass job."""

    amount: int
    note: str = ""


class Report(BaseModel):
    """A pydantic job."""

    report_id: str
    pages: list[int] = []


class Recorder:
    """Handlers that record what they ran, and fail on request."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int]] = []
        self.fail_amounts: set[int] = set()

    async def add(self, job: Add, ctx: JobContext[object]) -> None:
        self.runs.append((str(ctx.job_id), ctx.attempt))
        if job.amount in self.fail_amounts:
            raise RuntimeError(f"refusing {job.note}")

    def report(self, job: Report, ctx: JobContext[object]) -> None:
        self.runs.append((str(ctx.job_id), ctx.attempt))


def make_registry(recorder: Recorder | None = None) -> JobRegistry:
    recorder = recorder or Recorder()
    registry = JobRegistry()
    registry.register("tests.add.v1", Add, recorder.add)
    registry.register("tests.report.v1", Report, recorder.report)
    return registry


def dispatch(
    key: str | None = None, *, queue: str = "default", tenant: str = "tenant-a", **extra: object
) -> DispatchOptions:
    return DispatchOptions(queue=queue, tenant_id=tenant, idempotency_key=key, **extra)  # type: ignore[arg-type]


LEASE = timedelta(seconds=30)


@asynccontextmanager
async def open_queue(
    url: str,
    registry: JobRegistry | None = None,
    *,
    clock: Clock | None = None,
    **options: object,
) -> AsyncIterator[DatabaseQueue]:
    opts = QueueOptions(**{"lease_duration": LEASE, **options})  # type: ignore[arg-type]
    queue = DatabaseQueue(
        url, registry or make_registry(), options=opts, clock=clock or ManualClock()
    )
    try:
        yield queue
    finally:
        await queue.close()


class SteppingClock(ManualClock):
    """A ManualClock that tells a test what waits on it. Every wait goes through
    ``sleep_until`` (``sleep`` included), with its deadline fixed when it was asked for: the
    worker's lease watch sleeps until its next renewal or deadline, so :meth:`sleeper` tells the
    test the worker is idle and the clock can be moved; :meth:`until_sleeping` waits for a
    loop's ``sleep`` of a given length (a poll, a heartbeat)."""

    def __init__(self) -> None:
        super().__init__()
        #: The length of every ``sleep`` asked for, in order.
        self.sleeps: list[float] = []
        self._waking: list[int] = []
        self._registered = asyncio.Condition()

    def sleep(self, seconds: float) -> Coroutine[Any, Any, None]:
        self.sleeps.append(seconds)
        return super().sleep(seconds)

    def sleep_until(self, deadline_ms: int) -> Coroutine[Any, Any, None]:
        return self._registered_sleep(deadline_ms)

    async def _registered_sleep(self, deadline_ms: int) -> None:
        self._waking.append(deadline_ms)
        async with self._registered:
            self._registered.notify_all()
        try:
            await super().sleep_until(deadline_ms)
        finally:
            self._waking.remove(deadline_ms)

    async def sleeper(self) -> None:
        """Return once something sleeps until a moment after now."""
        async with self._registered:
            await self._registered.wait_for(lambda: any(w > self.now_ms() for w in self._waking))

    async def until_sleeping(self, seconds: float, *, after: int = 0) -> None:
        """Return once a ``sleep`` of ``seconds`` has started, beyond the first ``after``."""
        async with self._registered:
            await self._registered.wait_for(lambda: seconds in self.sleeps[after:])


#: How long ``until_watching`` waits for the worker, in seconds.
WATCH_WAIT = 10.0


async def until_watching(clock: SteppingClock, task: asyncio.Future[bool]) -> None:
    """Wait until the worker sleeps on its lease watch; fail if ``run_once`` ended instead."""
    waiter = asyncio.ensure_future(clock.sleeper())
    try:
        done, _ = await asyncio.wait(
            {waiter, task}, timeout=WATCH_WAIT, return_when="FIRST_COMPLETED"
        )
    finally:
        waiter.cancel()
    if waiter in done:
        return
    if task in done:
        task.result()
        pytest.fail("run_once finished while the handler should still be running")
    pytest.fail("the worker never started watching the lease")


def inspector_of(queue: DatabaseQueue) -> QueueInspector:
    """An inspector over ``queue``'s own store and clock (not closed separately: the queue
    owns the connections)."""
    return QueueInspector(queue.store, clock=queue.clock)


#: A safety net against a hung test, never a way to let time pass.
WAIT = 10.0

T = TypeVar("T")


async def within(awaitable: Awaitable[T]) -> T:
    """``awaitable``, failing the test if it takes longer than :data:`WAIT`."""
    async with asyncio.timeout(WAIT):
        return await awaitable


async def until(
    condition: Callable[[], bool | Awaitable[bool]],
    *,
    what: str,
    seconds: float = WAIT,
    interval: float = 0.01,
) -> None:
    """Return once ``condition()`` (a plain or an async function) holds, asking again every
    ``interval`` seconds; fail the test after ``seconds``, naming ``what`` it waited for. For a
    state with no event to wait on: a row in a real database, a file or socket another process
    makes, an attribute of the code under test. ``seconds`` bounds a hung test; it is never a
    way to let time pass (that is the :class:`ManualClock`'s)."""
    bound = asyncio.timeout(seconds)
    try:
        async with bound:
            while True:
                met = condition()
                if met if isinstance(met, bool) else await met:
                    return
                await asyncio.sleep(interval)
    except TimeoutError:
        if not bound.expired():
            raise
    pytest.fail(f"timed out after {seconds}s waiting for {what}")


async def status_of(
    queue: DatabaseQueue, job_id: UUID, name: str = "default", tenant: str = "tenant-a"
) -> JobStatus:
    """A job's status, which must exist."""
    status = await queue.get_status(job_id, name, tenant)
    assert status is not None
    return status


async def noop(job: object, ctx: JobContext[Any]) -> None:
    """A handler that does nothing."""
    return None


def registry_for(add: Any = noop, report: Any = None) -> JobRegistry:
    """The test job types with these handlers (``report`` only when given)."""
    registry = JobRegistry()
    registry.register("tests.add.v1", Add, add)
    if report is not None:
        registry.register("tests.report.v1", Report, report)
    return registry


def engine_of(queue: DatabaseQueue) -> AsyncEngine:
    """The SQLAlchemy engine under ``queue``'s store (below the telemetry layer)."""
    from caravel.store.base import SqlStore

    store = getattr(queue.store, "inner", queue.store)
    assert isinstance(store, SqlStore)
    return store.engine


class NeverFinishes:
    """A handler that runs until it is cancelled: ``started`` is set when it begins,
    ``cancelled`` when its cancellation arrives."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def __call__(self, job: object, ctx: JobContext[Any]) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


async def enqueue_and_claim(
    queue: DatabaseQueue, job: object | None = None, where: DispatchOptions | None = None
) -> tuple[EnqueueResult, ClaimedJob]:
    """Enqueue ``job`` (``Add(1)`` by default) and claim it as a worker would; both results."""
    from caravel import Leases

    where = where if where is not None else dispatch()
    accepted = await queue.enqueue(job if job is not None else Add(1), where)
    claimed = await Leases(queue).claim(where.queue)
    assert claimed is not None
    assert claimed.job_id == accepted.job_id
    return accepted, claimed
