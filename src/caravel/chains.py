"""Chains: jobs that run one after another, each once the step before it has completed.

A chain's steps are all saved in one transaction when it is enqueued: the first ready like any
job, every later one *held* (it exists, with its id, but no worker can claim it). When a step
completes, the database releases the next one in the transaction that records the completion
(a chain is a workflow: the workflow trigger), handing it the step's stored result; so a
crash between the two can neither lose the next step nor run it twice. A step that is
dead-lettered or cancelled stops the chain there, visibly (:class:`ChainStatus`); replaying that
step resumes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal
from uuid import UUID

from caravel.errors import ValidationError
from caravel.jobs import DispatchOptions, JobState, JobStatus
from caravel.limits import MAX_CHAIN_STEPS
from caravel.options import QueueOptions
from caravel.preparation import dispatch_of, prepare_jobs
from caravel.registry import JobRegistry
from caravel.store.links import LinkedJob
from caravel.store.values import NewJob
from caravel.validation import bounded_list

__all__ = [
    "ChainResult",
    "ChainState",
    "ChainStatus",
    "chain_status",
    "chain_steps",
    "link_chain",
    "prepare_chain",
]

#: ``running``: a step is waiting or running; ``completed``: every step completed;
#: ``stopped``: a step was dead-lettered or cancelled, and the steps after it stay held.
ChainState = Literal["running", "completed", "stopped"]


@dataclass(frozen=True, slots=True)
class ChainResult:
    """An enqueued chain: its id (its first step's job id) and every step's job id, in order.
    ``already_enqueued`` when the first step's idempotency key named a chain saved before (the
    ids are then that chain's)."""

    chain_id: UUID
    job_ids: list[UUID]
    already_enqueued: bool = False


@dataclass(frozen=True, slots=True)
class ChainStatus:
    """A chain's steps in order, each a job status (a held step is ``ready`` with
    :attr:`~caravel.JobStatus.held` set), and what they add up to."""

    chain_id: UUID
    steps: list[JobStatus]
    state: ChainState

    @property
    def stopped_at(self) -> JobStatus | None:
        """The dead-lettered or cancelled step that stopped the chain, if it is stopped."""
        return next((s for s in self.steps if s.state in _STOPPING), None)


_STOPPING = (JobState.DEAD_LETTER, JobState.CANCELLED)


def chain_status(chain_id: UUID, steps: list[JobStatus]) -> ChainStatus | None:
    if not steps:
        return None
    state: ChainState = "running"
    by_step = {step.chain_step: step for step in steps}

    def orphaned(step: JobStatus) -> bool:
        # A held step whose previous step is gone: nothing can release it any more.
        previous = by_step.get((step.chain_step or 0) - 1)
        return step.held and (previous is None or previous.state is JobState.PRUNED)

    if any(step.state in _STOPPING or orphaned(step) for step in steps):
        state = "stopped"
    elif all(step.state in (JobState.COMPLETED, JobState.PRUNED) for step in steps):
        state = "completed"
    return ChainStatus(chain_id, steps, state)


def chain_steps(
    steps: Iterable[tuple[object, DispatchOptions]],
) -> list[tuple[object, DispatchOptions]]:
    """A chain's steps as a list, refused (``steps``) outside 1 to ``MAX_CHAIN_STEPS``, having
    read at most one step past the limit."""
    rule = f"a chain has 1 to {MAX_CHAIN_STEPS} steps"
    return bounded_list("steps", steps, 1, MAX_CHAIN_STEPS, rule)


def prepare_chain(
    registry: JobRegistry,
    options: QueueOptions,
    steps: Iterable[tuple[object, DispatchOptions]],
    now: int,
) -> list[LinkedJob]:
    """Validate and serialize a chain's steps, linked: the first ready, the rest held. Every
    step has the first step's tenant; only the first may carry an idempotency key (it makes
    the whole chain idempotent), and none a pending key; later steps have no ``not_before``
    or ``delay`` (they run when released)."""
    steps = chain_steps(steps)
    tenant = None
    for index, item in enumerate(steps):
        dispatch = dispatch_of(item, f"steps[{index}]")
        tenant = dispatch.tenant_id if tenant is None else tenant
        _check_step(index, dispatch, tenant)
    return link_chain(prepare_jobs(registry, options, steps, now))


def link_chain(new_jobs: Sequence[NewJob]) -> list[LinkedJob]:
    """Prepared jobs linked as a chain's steps, in order: the first ready, each later one held
    and named by the step before it; the chain's id is the first step's."""
    chain_id = new_jobs[0].id
    return [
        LinkedJob(
            job,
            held=index > 0,
            chain_id=chain_id,
            chain_step=index,
            chain_next=new_jobs[index + 1].id if index + 1 < len(new_jobs) else None,
        )
        for index, job in enumerate(new_jobs)
    ]


def _check_step(index: int, dispatch: DispatchOptions, tenant: str) -> None:
    field = f"steps[{index}]"
    if dispatch.tenant_id != tenant:
        raise ValidationError(f"{field}.tenant_id", "every step of a chain has the same tenant")
    if dispatch.pending_key is not None:
        raise ValidationError(f"{field}.pending_key", "a chain step cannot have a pending key")
    if index == 0:
        return
    if dispatch.idempotency_key is not None:
        raise ValidationError(
            f"{field}.idempotency_key",
            "only a chain's first step takes an idempotency key (it covers the whole chain)",
        )
    for name, value in (("not_before", dispatch.not_before), ("delay", dispatch.delay)):
        if value is not None:
            raise ValidationError(
                f"{field}.{name}",
                "a later step runs when the step before it completes; snooze in its handler to "
                "wait",
            )
