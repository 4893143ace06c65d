"""Assertions about what was enqueued, with failure messages that show what was enqueued
instead.

Each reads through the queue's store, so it sees exactly what a worker would claim. For a
:class:`~caravel.DatabaseQueue` the assertion is awaited (``await assert_enqueued(queue, ...)``);
for a ``SyncQueue`` it is a plain call.
"""

from __future__ import annotations

from collections.abc import Coroutine
from datetime import datetime, timedelta
from typing import Any, overload

from caravel.jobs import JobState
from caravel.queue import DatabaseQueue
from caravel.testing._shells import SyncShell, on_queue
from caravel.testing.enqueued import EnqueuedJob, Expected, read_jobs, wire_name_of

__all__ = ["all_enqueued", "assert_enqueued", "refute_enqueued"]

#: Jobs listed in a failure message before the rest are only counted.
_SHOWN = 20

Job = type[Any] | str


def _expected(
    queue: DatabaseQueue,
    job: Job | None,
    payload: Any,
    queue_name: str | None,
    tenant_id: str | None,
    state: JobState | None,
    delay: timedelta | None,
    due_at: datetime | None,
) -> Expected:
    return Expected(
        job_type=wire_name_of(queue, job),
        payload=payload,
        queue=queue_name,
        tenant_id=tenant_id,
        state=state,
        delay=delay,
        due_at=due_at,
    )


async def _matching(queue: DatabaseQueue, expected: Expected) -> list[EnqueuedJob]:
    return [job for job in await read_jobs(queue, expected) if expected.matches(job, queue)]


async def _everything(queue: DatabaseQueue) -> str:
    jobs = await read_jobs(queue, Expected())
    if not jobs:
        return "nothing was enqueued"
    lines = [f"enqueued were ({len(jobs)}):"]
    lines += [f"  - {job.describe()}" for job in jobs[:_SHOWN]]
    if len(jobs) > _SHOWN:
        lines.append(f"  ... and {len(jobs) - _SHOWN} more")
    return "\n".join(lines)


@overload
def assert_enqueued(
    queue: DatabaseQueue,
    job: Job,
    *,
    payload: Any = None,
    queue_name: str | None = None,
    tenant_id: str | None = None,
    state: JobState | None = None,
    delay: timedelta | None = None,
    due_at: datetime | None = None,
    count: int | None = None,
) -> Coroutine[Any, Any, EnqueuedJob]: ...
@overload
def assert_enqueued(
    queue: SyncShell,
    job: Job,
    *,
    payload: Any = None,
    queue_name: str | None = None,
    tenant_id: str | None = None,
    state: JobState | None = None,
    delay: timedelta | None = None,
    due_at: datetime | None = None,
    count: int | None = None,
) -> EnqueuedJob: ...
def assert_enqueued(
    queue: DatabaseQueue | SyncShell,
    job: Job,
    *,
    payload: Any = None,
    queue_name: str | None = None,
    tenant_id: str | None = None,
    state: JobState | None = None,
    delay: timedelta | None = None,
    due_at: datetime | None = None,
    count: int | None = None,
) -> Coroutine[Any, Any, EnqueuedJob] | EnqueuedJob:
    """Assert that a job of ``job`` (a wire name or a registered payload type) is in the queue,
    in any state unless ``state`` is given, and return the oldest match.

    ``payload`` is a mapping the stored payload must contain, or a job value it must equal once
    serialized. ``queue_name``, ``tenant_id``, ``delay`` (due time minus enqueue time) and
    ``due_at`` must match when given; ``count`` asks for exactly that many matches.
    """

    async def check(inner: DatabaseQueue) -> EnqueuedJob:
        expected = _expected(inner, job, payload, queue_name, tenant_id, state, delay, due_at)
        found = await _matching(inner, expected)
        if found and (count is None or len(found) == count):
            return found[0]
        wanted = "a job" if count is None else f"exactly {count} jobs"
        seen = "none" if not found else f"{len(found)}"
        raise AssertionError(
            f"expected {wanted} {expected.describe()}, found {seen}; " + await _everything(inner)
        )

    return on_queue(queue, check)


@overload
def refute_enqueued(
    queue: DatabaseQueue,
    job: Job | None = None,
    *,
    payload: Any = None,
    queue_name: str | None = None,
    tenant_id: str | None = None,
    state: JobState | None = None,
    delay: timedelta | None = None,
    due_at: datetime | None = None,
) -> Coroutine[Any, Any, None]: ...
@overload
def refute_enqueued(
    queue: SyncShell,
    job: Job | None = None,
    *,
    payload: Any = None,
    queue_name: str | None = None,
    tenant_id: str | None = None,
    state: JobState | None = None,
    delay: timedelta | None = None,
    due_at: datetime | None = None,
) -> None: ...
def refute_enqueued(
    queue: DatabaseQueue | SyncShell,
    job: Job | None = None,
    *,
    payload: Any = None,
    queue_name: str | None = None,
    tenant_id: str | None = None,
    state: JobState | None = None,
    delay: timedelta | None = None,
    due_at: datetime | None = None,
) -> Coroutine[Any, Any, None] | None:
    """Assert that no job matches (the same matching as :func:`assert_enqueued`; with no
    ``job`` and no filters, that the queue holds no job at all)."""

    async def check(inner: DatabaseQueue) -> None:
        expected = _expected(inner, job, payload, queue_name, tenant_id, state, delay, due_at)
        found = await _matching(inner, expected)
        if found:
            lines = [f"  - {one.describe()}" for one in found[:_SHOWN]]
            raise AssertionError(
                f"expected no job {expected.describe()}, found {len(found)}:\n" + "\n".join(lines)
            )

    return on_queue(queue, check)


@overload
def all_enqueued(
    queue: DatabaseQueue,
    job: Job | None = None,
    *,
    payload: Any = None,
    queue_name: str | None = None,
    tenant_id: str | None = None,
    state: JobState | None = None,
    delay: timedelta | None = None,
    due_at: datetime | None = None,
) -> Coroutine[Any, Any, list[EnqueuedJob]]: ...
@overload
def all_enqueued(
    queue: SyncShell,
    job: Job | None = None,
    *,
    payload: Any = None,
    queue_name: str | None = None,
    tenant_id: str | None = None,
    state: JobState | None = None,
    delay: timedelta | None = None,
    due_at: datetime | None = None,
) -> list[EnqueuedJob]: ...
def all_enqueued(
    queue: DatabaseQueue | SyncShell,
    job: Job | None = None,
    *,
    payload: Any = None,
    queue_name: str | None = None,
    tenant_id: str | None = None,
    state: JobState | None = None,
    delay: timedelta | None = None,
    due_at: datetime | None = None,
) -> Coroutine[Any, Any, list[EnqueuedJob]] | list[EnqueuedJob]:
    """Every job that matches (as :func:`assert_enqueued` matches), oldest first."""

    async def read(inner: DatabaseQueue) -> list[EnqueuedJob]:
        expected = _expected(inner, job, payload, queue_name, tenant_id, state, delay, due_at)
        return await _matching(inner, expected)

    return on_queue(queue, read)
