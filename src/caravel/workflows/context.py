"""What a workflow's step knows in its handler (:attr:`caravel.JobContext.workflow`): which
workflow and step it is, and lazy reads of its dependencies' results, failures and wait. Nothing
is read until the handler asks, so a fan-in over 10,000 steps loads nothing it does not page
through."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

from caravel.errors import WorkflowError
from caravel.limits import MAX_WORKFLOW_EDGES
from caravel.store.workflows.records import WorkflowReads

T = TypeVar("T")

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "FailedDependency",
    "StepOutcome",
    "WaitOutcome",
    "WorkflowContext",
    "workflow_of",
]

#: How many results :meth:`WorkflowContext.results` reads per page unless told.
DEFAULT_PAGE_SIZE = 500
_MAX_PAGE_SIZE = 10_000


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """A dependency's outcome: its index in its group (``None`` for a single step), its state
    and its decoded result (``None`` when it stored none)."""

    index: int | None
    state: str
    result: Any


@dataclass(frozen=True, slots=True)
class FailedDependency:
    """A dependency that was dead-lettered or cancelled (``on_failure="continue"`` steps run
    anyway and can ask)."""

    step: str
    index: int | None
    state: str


@dataclass(frozen=True, slots=True)
class WaitOutcome:
    """How a step's signal wait ended: the signal's name and decoded payload when it arrived
    before the step was claimed, else ``signal`` ``None`` and ``timed_out`` set."""

    signal: str | None
    payload: Any
    timed_out: bool


class WorkflowContext:
    """A running step's workflow: ``id``, ``step`` and ``index`` (in its group, ``None`` for a
    single step), and reads of the workflow's other steps, each a query when awaited.

    A synchronous handler (run in a worker thread) calls the ``*_sync`` twins instead: each
    runs its query on the worker's event loop and blocks the handler's thread until it is
    answered."""

    __slots__ = ("_job_id", "_loop", "_reads", "_tenant_id", "id", "index", "step")

    def __init__(
        self,
        reads: WorkflowReads,
        *,
        workflow_id: UUID,
        step: str,
        index: int | None,
        job_id: UUID,
        tenant_id: str,
    ) -> None:
        self._reads = reads
        self._loop = asyncio.get_running_loop()  # the worker's, which the store belongs to
        self._job_id = job_id
        self._tenant_id = tenant_id
        self.id = workflow_id
        self.step = step
        self.index = index

    def __repr__(self) -> str:
        return f"WorkflowContext(id={self.id}, step={self.step!r}, index={self.index})"

    async def result(self, step: str) -> Any:
        """The decoded result of single step ``step`` (``None`` when it stored none). A group
        raises :class:`~caravel.errors.WorkflowError`: page it with :meth:`results`."""
        page = await self._reads.workflow_results(self.id, self._tenant_id, step, None, 2)
        if not page:
            raise WorkflowError(step, "no such step in this workflow")
        if page[0].index is not None:
            raise WorkflowError(step, "is a group: read it with results() or all_results()")
        return _decoded(page[0].result)

    async def results(
        self, step: str, page_size: int = DEFAULT_PAGE_SIZE
    ) -> AsyncIterator[StepOutcome]:
        """Step ``step``'s outcomes (a group's members by index), read ``page_size`` at a time
        (1 to 10,000)."""
        if isinstance(page_size, bool) or not isinstance(page_size, int):
            raise WorkflowError(step, f"page_size is 1 to {_MAX_PAGE_SIZE}")
        if not 1 <= page_size <= _MAX_PAGE_SIZE:
            raise WorkflowError(step, f"page_size is 1 to {_MAX_PAGE_SIZE}")
        after: int | None = None
        while True:
            page = await self._reads.workflow_results(
                self.id, self._tenant_id, step, after, page_size
            )
            for found in page:
                yield StepOutcome(found.index, found.state, _decoded(found.result))
            if len(page) < page_size or page[-1].index is None:
                return
            after = page[-1].index

    async def all_results(self, step: str) -> list[StepOutcome]:
        """Every outcome of step ``step`` at once (a whole group: ask only when it fits)."""
        return [outcome async for outcome in self.results(step)]

    async def failed_dependencies(self) -> list[FailedDependency]:
        """This step's dependencies that were dead-lettered or cancelled."""
        found = await self._reads.workflow_dependencies(self._job_id, True, MAX_WORKFLOW_EDGES)
        return [FailedDependency(d.step, d.index, d.state) for d in found]

    async def wait(self) -> WaitOutcome | None:
        """How this step's signal wait ended; ``None`` when it waited for no signal."""
        found = await self._reads.workflow_wait(self._job_id)
        if found is None:
            return None
        payload = None if found.signal_payload is None else json.loads(found.signal_payload)
        return WaitOutcome(found.signal, payload, found.timed_out)

    # ----- for synchronous handlers --------------------------------------------------------

    def result_sync(self, step: str) -> Any:
        """:meth:`result`, from a synchronous handler."""
        return self._blocking(self.result(step))

    def results_sync(self, step: str, page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[StepOutcome]:
        """:meth:`results`, from a synchronous handler: one query per page, as it is iterated."""
        pages = self.results(step, page_size)

        async def following() -> StepOutcome | None:
            return await anext(pages, None)

        while (found := self._blocking(following())) is not None:
            yield found

    def all_results_sync(self, step: str) -> list[StepOutcome]:
        """:meth:`all_results`, from a synchronous handler."""
        return self._blocking(self.all_results(step))

    def failed_dependencies_sync(self) -> list[FailedDependency]:
        """:meth:`failed_dependencies`, from a synchronous handler."""
        return self._blocking(self.failed_dependencies())

    def wait_sync(self) -> WaitOutcome | None:
        """:meth:`wait`, from a synchronous handler."""
        return self._blocking(self.wait())

    def _blocking(self, call: Coroutine[Any, Any, T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            call.close()
            rule = "the *_sync reads are for synchronous handlers; await the async ones here"
            raise WorkflowError(self.step, rule)
        return asyncio.run_coroutine_threadsafe(call, self._loop).result()


def _decoded(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def workflow_of(
    upstream: str, reads: WorkflowReads, job_id: UUID, tenant_id: str
) -> WorkflowContext | None:
    """The context of a step from its stored ``upstream`` (``{"workflow": {"id", "step",
    "index"}}``, written at insert), or ``None`` for a job of no workflow."""
    if '"workflow"' not in upstream:  # a chain's or batch's: no second parse
        return None
    found = json.loads(upstream).get("workflow")
    if not isinstance(found, dict):
        return None
    index = found.get("index")
    return WorkflowContext(
        reads,
        workflow_id=UUID(str(found["id"])),
        step=str(found["step"]),
        index=None if index is None else int(index),
        job_id=job_id,
        tenant_id=tenant_id,
    )
