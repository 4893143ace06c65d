"""Replaying a filtered selection of dead letters in the background, in chunks, with progress a
page can show.

A run is started by a confirmed POST. It replays at most the number of dead letters that matched
when it started (so a job that fails again during the run is not replayed twice by it), a chunk
at a time, oldest first, and records how far it got. Runs live in this process's memory: the
last few are kept for their progress pages.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import OrderedDict
from dataclasses import dataclass

from caravel.errors import CaravelError
from caravel.inspector import QueueInspector
from caravel.jobs import JobState
from caravel.queue import DatabaseQueue
from caravel.web.filters import Filters

__all__ = ["MAX_SELECTION", "ReplayRun", "ReplayRuns", "count_dead_letters"]

#: The most dead letters one confirmed selection replays.
MAX_SELECTION = 10_000
CHUNK = 50
KEEP_RUNS = 20


async def count_dead_letters(reader: QueueInspector, filters: Filters) -> int:
    """How many dead letters match ``filters``, counting at most :data:`MAX_SELECTION`."""
    if filters.tenant is None and filters.job_type is None and filters.tag is None:
        counts = await reader.queue_counts(filters.queue)
        return min(sum(c.dead_letter for c in counts), MAX_SELECTION)
    found = await reader.list_jobs(
        queue=filters.queue,
        tenant_id=filters.tenant,
        job_type=filters.job_type,
        tag=filters.tag,
        state=JobState.DEAD_LETTER,
        limit=MAX_SELECTION,
    )
    return len(found)


@dataclass
class ReplayRun:
    """One selection being replayed. ``processed`` counts jobs tried, ``replayed`` those that
    were still dead letters and are now ready."""

    id: str
    started_by: str
    filters: Filters
    total: int
    processed: int = 0
    replayed: int = 0
    finished: bool = False
    error: str | None = None

    @property
    def skipped(self) -> int:
        return self.processed - self.replayed


class ReplayRuns:
    """The runs of one dashboard, and their background tasks."""

    def __init__(self, reader: QueueInspector, writer: DatabaseQueue) -> None:
        self._reader = reader
        self._writer = writer
        self._runs: OrderedDict[str, ReplayRun] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, started_by: str, filters: Filters, total: int) -> ReplayRun:
        run = ReplayRun(
            id=secrets.token_urlsafe(12), started_by=started_by, filters=filters, total=total
        )
        self._runs[run.id] = run
        while len(self._runs) > KEEP_RUNS:
            oldest = next(iter(self._runs.values()))
            if not oldest.finished:
                break
            self._runs.popitem(last=False)
        task = asyncio.get_running_loop().create_task(self._run(run), name="caravel-replay")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run

    def get(self, run_id: str) -> ReplayRun | None:
        return self._runs.get(run_id)

    async def _run(self, run: ReplayRun) -> None:
        f = run.filters
        try:
            while run.processed < run.total:
                batch = await self._reader.list_jobs(
                    queue=f.queue,
                    tenant_id=f.tenant,
                    job_type=f.job_type,
                    tag=f.tag,
                    state=JobState.DEAD_LETTER,
                    limit=min(CHUNK, run.total - run.processed),
                    oldest_first=True,
                )
                if not batch:
                    break
                replayed_before = run.replayed
                for job in batch:
                    if await self._writer.replay(job.job_id, job.queue, job.tenant_id):
                        run.replayed += 1
                    run.processed += 1
                if run.replayed == replayed_before:
                    break  # nothing in this chunk could be replayed: stop rather than spin
                await asyncio.sleep(0)
        except CaravelError as exc:
            # Error texts name the operation and rule only, never a payload or a tenant.
            run.error = f"{type(exc).__name__}: {exc}"
        finally:
            run.finished = True

    async def wait(self) -> None:
        """Wait for every run in progress to finish (tests, and a graceful shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Stop runs in progress; what they replayed so far stays replayed."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
