"""Test jobs and queue builders shared by the suites."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from pydantic import BaseModel

from caravel import DatabaseQueue, DispatchOptions, JobContext, JobRegistry, QueueOptions
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
    clock: ManualClock | None = None,
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
