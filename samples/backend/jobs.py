"""The backend's one job type and its repeat-safe handler.

``POST /counter/events`` enqueues a :class:`CounterEvent` under the signed-in user's id as the
queue tenant. The handler records one result row keyed by the job id, scoped by the stored
tenant (``ctx.tenant_id``), never by anything in the payload.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

from caravel_samples.backend import results
from caravel_samples.backend.timerange import now_ms
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from caravel import JobContext, JobRegistry

QUEUE = "counter"
JOB_TYPE = "samples.counter.record.v1"
MIN_QUANTITY, MAX_QUANTITY = 1, 1000

registry = JobRegistry()


@dataclass(frozen=True)
class CounterEvent:
    """Add ``quantity`` (1 to 1000) to the submitting user's counter."""

    quantity: int


class InvalidQuantityError(Exception):
    """A stored payload outside the accepted range (the API never enqueues one)."""


@registry.handles(JOB_TYPE, CounterEvent)
async def record_counter_event(job: CounterEvent, ctx: JobContext[AsyncConnection]) -> None:
    if not (MIN_QUANTITY <= job.quantity <= MAX_QUANTITY):
        raise InvalidQuantityError
    await results.record(ctx.scope, ctx.job_id, ctx.tenant_id, job.quantity, now_ms())


def job_scope(engine: AsyncEngine) -> Callable[[], AbstractAsyncContextManager[AsyncConnection]]:
    """A fresh connection around each job, reachable in the handler as ``ctx.scope``."""

    @asynccontextmanager
    async def scope() -> AsyncIterator[AsyncConnection]:
        async with engine.connect() as conn:
            yield conn

    return scope
