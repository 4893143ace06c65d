"""Building a workflow: named steps, each one job (``add``) or a group of jobs (``add_many``),
and what each waits for. Nothing is written until ``queue.enqueue_workflow``; what a single
step can break is refused when it is added, what needs the whole graph (unknown dependencies,
cycles, the edge limit) when it is enqueued (:mod:`caravel.workflows.graph`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import get_args

from caravel.clock import duration_ms
from caravel.errors import WorkflowError
from caravel.jobs import DEFAULT_TENANT, DispatchOptions
from caravel.limits import MAX_DELAY_DAYS, MAX_WORKFLOW_STEPS
from caravel.store.workflows.records import OnFailure
from caravel.validation import check_identifier

__all__ = ["StepSpec", "Workflow", "check_step_name"]

_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_NAME_RULE = "a step or signal name is 1 to 128 characters of [A-Za-z0-9_.:-]"
_MAX_WAIT_MS = MAX_DELAY_DAYS * 86_400_000


def check_step_name(value: object, step: str | None, what: str) -> str:
    """``value`` as a step or signal name, else :class:`WorkflowError` naming ``step``."""
    if not isinstance(value, str) or _NAME.fullmatch(value) is None:
        raise WorkflowError(step, f"{what}: {_NAME_RULE}")
    return value


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One step as added: its name, its jobs with their options (one for ``add``, the group's
    members for ``add_many``), the steps it runs after, and what it waits for besides them."""

    name: str
    jobs: tuple[tuple[object, DispatchOptions], ...]
    group: bool
    after: tuple[str, ...]
    on_failure: OnFailure
    wait_for: str | None
    timeout_ms: int | None
    delay_ms: int | None


class Workflow:
    """A graph of jobs to enqueue together (:meth:`caravel.DatabaseQueue.enqueue_workflow`).

    Each step runs once every step it runs ``after`` has finished: completed, or, with
    ``on_failure="continue"``, dead-lettered or cancelled too. Every step has the workflow's
    tenant; ``idempotency_key`` makes the whole workflow idempotent (its steps take no keys of
    their own). Steps added without ``options`` go to ``queue``. Bad input raises
    :class:`~caravel.errors.WorkflowError` naming the step and the rule. See the workflows guide.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        tenant_id: str = DEFAULT_TENANT,
        idempotency_key: str | None = None,
        queue: str = "default",
    ) -> None:
        if name is not None:
            check_step_name(name, None, "name")
        self.name = name
        self.tenant_id = check_identifier(tenant_id, "tenant_id")
        self.idempotency_key = (
            None
            if idempotency_key is None
            else check_identifier(idempotency_key, "idempotency_key")
        )
        #: The options of a step added without ``options`` (its queue, this tenant).
        self.default_options = DispatchOptions(queue=queue, tenant_id=self.tenant_id)
        self._steps: dict[str, StepSpec] = {}
        self._jobs = 0

    @property
    def steps(self) -> tuple[StepSpec, ...]:
        """The steps in the order they were added."""
        return tuple(self._steps.values())

    def add(
        self,
        step: str,
        job: object,
        *,
        after: Sequence[str] = (),
        options: DispatchOptions | None = None,
        on_failure: OnFailure = "stop",
        wait_for: str | None = None,
        timeout: timedelta | None = None,
        delay: timedelta | None = None,
    ) -> str:
        """Add one job as step ``step``, run after the steps named in ``after`` (a group's name
        means every member). ``wait_for`` also waits for that signal
        (:meth:`~caravel.DatabaseQueue.signal`), at most ``timeout`` after the dependencies
        finished; ``delay`` runs it no earlier than that long after its release. Returns
        ``step``."""
        self._add(step, [job], False, after, options, on_failure, wait_for, timeout, delay)
        return step

    def add_many(
        self,
        step: str,
        jobs: Iterable[object],
        *,
        after: Sequence[str] = (),
        options: DispatchOptions | None = None,
        on_failure: OnFailure = "stop",
    ) -> str:
        """Add a group (a fan-out): members ``(step, 0)`` to ``(step, n - 1)``, each run after
        the steps named in ``after``. A later step ``after=[step]`` runs after every member (a
        fan-in). Returns ``step``."""
        self._add(step, jobs, True, after, options, on_failure, None, None, None)
        return step

    def _add(
        self,
        step: str,
        jobs: Iterable[object],
        group: bool,
        after: Sequence[str],
        options: DispatchOptions | None,
        on_failure: OnFailure,
        wait_for: str | None,
        timeout: timedelta | None,
        delay: timedelta | None,
    ) -> None:
        name = check_step_name(step, None, "step")
        if name in self._steps:
            raise WorkflowError(name, "step names are unique within a workflow")
        if on_failure not in get_args(OnFailure):
            raise WorkflowError(name, 'on_failure is "stop" or "continue"')
        dependencies = _after(name, after)
        if wait_for is not None:
            check_step_name(wait_for, name, "wait_for")
        if timeout is not None and wait_for is None:
            raise WorkflowError(name, "a timeout needs wait_for (it bounds the signal's wait)")
        dispatch = self._dispatch(name, options)
        try:
            members = list(jobs)
        except TypeError:
            raise WorkflowError(name, "add_many takes an iterable of jobs") from None
        if group and not members:
            raise WorkflowError(name, "a group has at least one job")
        if self._jobs + len(members) > MAX_WORKFLOW_STEPS:
            raise WorkflowError(name, f"a workflow has at most {MAX_WORKFLOW_STEPS} steps")
        self._jobs += len(members)
        self._steps[name] = StepSpec(
            name=name,
            jobs=tuple((job, dispatch) for job in members),
            group=group,
            after=dependencies,
            on_failure=on_failure,
            wait_for=wait_for,
            timeout_ms=_wait_ms(name, "timeout", timeout),
            delay_ms=_wait_ms(name, "delay", delay),
        )

    def _dispatch(self, step: str, options: DispatchOptions | None) -> DispatchOptions:
        """The step's options under the workflow's tenant, refused when they carry what only
        the workflow may (keys, a tenant of their own, a due time)."""
        if options is None:
            return self.default_options
        if not isinstance(options, DispatchOptions):
            raise WorkflowError(step, "options must be a DispatchOptions")
        if options.tenant_id != self.tenant_id:
            if options.tenant_id != DEFAULT_TENANT:
                raise WorkflowError(step, "every step has the workflow's tenant")
            options = replace(options, tenant_id=self.tenant_id)
        if options.idempotency_key is not None:
            rule = "a step takes no idempotency key (the workflow's key covers the whole graph)"
            raise WorkflowError(step, rule)
        if options.pending_key is not None:
            raise WorkflowError(step, "a step takes no pending key")
        if options.not_before is not None or options.delay is not None:
            raise WorkflowError(step, "a step runs when its dependencies finish; use delay=")
        return options


def _after(step: str, after: Sequence[str]) -> tuple[str, ...]:
    if isinstance(after, str):
        raise WorkflowError(step, 'after is a list of step names, such as ["fetch"]')
    try:
        names = tuple(after)
    except TypeError:
        raise WorkflowError(step, "after is a list of step names") from None
    for name in names:
        check_step_name(name, step, "after")
        if name == step:
            raise WorkflowError(step, "a step cannot run after itself (a cycle)")
    if len(set(names)) != len(names):
        raise WorkflowError(step, "after names each step once")
    return names


def _wait_ms(step: str, field: str, value: timedelta | None) -> int | None:
    if value is None:
        return None
    if not isinstance(value, timedelta) or not timedelta(0) <= value:
        raise WorkflowError(step, f"{field} is a timedelta from 0 to {MAX_DELAY_DAYS} days")
    ms = duration_ms(value)
    if ms > _MAX_WAIT_MS:
        raise WorkflowError(step, f"{field} is a timedelta from 0 to {MAX_DELAY_DAYS} days")
    return ms
