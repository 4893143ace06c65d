"""What operators are shown of a workflow (``caravel workflows show`` and the dashboard's
workflow page): one node per step name, a group of ``add_many`` members one node with its
counts by state rather than 10,000 nodes, placed in layers (a node one layer right of the
last of the steps it runs after), and for each node the words that say why it is not running:
which dependency failed, which signal it waits for, its timer.

Built from an operator's :class:`~caravel.workflows.WorkflowStatus` alone (it carries no
payload and no result), with no further read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING
from uuid import UUID

if TYPE_CHECKING:
    from caravel.workflows.status import WorkflowStatus, WorkflowStep

__all__ = [
    "NODE_STATES",
    "STATE_WORDS",
    "FailedMember",
    "StepNode",
    "counts_words",
    "node_words",
    "shown_counts",
    "step_nodes",
    "step_shown_state",
    "wait_words",
]

#: A step's shown states, most urgent first: a node takes the first its members are in.
#: ``blocked`` is held by a failed dependency; ``held`` waits for dependencies, a signal or a
#: timer; the others are its job's stored state.
NODE_STATES: tuple[str, ...] = (
    "dead_letter",
    "blocked",
    "running",
    "ready",
    "held",
    "cancelled",
    "completed",
)
_FAILED = ("dead_letter", "cancelled")


def step_shown_state(step: WorkflowStep) -> str:
    """``blocked``, ``held``, or the step's job's state. A step its timeout released is still
    waiting for its signal (its job is ready, due when the timeout passes): ``held`` too."""
    if step.blocked:
        return "blocked"
    if step.held:
        return "held"
    if step.state == "ready" and step.wait_signal is not None and not step.signal_received:
        return "held"
    return step.state


@dataclass(frozen=True, slots=True)
class FailedMember:
    """A step's job that was dead-lettered or cancelled: the one to replay."""

    job_id: UUID
    queue: str
    tenant_id: str
    step: str
    index: int | None
    state: str

    @property
    def label(self) -> str:
        """``resize[2]`` for a group's member, ``fetch`` for a single step."""
        return self.step if self.index is None else f"{self.step}[{self.index}]"


@dataclass(frozen=True, slots=True)
class StepNode:
    """One step name of a workflow: a single step (``members`` 1, ``job_id`` its job) or a
    group (``job_id`` ``None``). ``counts`` are its members by shown state, ``state`` the most
    urgent of them (:data:`NODE_STATES`), ``after`` the step names it runs after, ``layer``
    its column (0 for steps that run after none), ``reasons`` why it is not running (empty
    when it is, or has finished), and ``failed`` its members that were dead-lettered or
    cancelled."""

    step: str
    group: bool
    members: int
    job_id: UUID | None
    queue: str
    job_type: str
    state: str
    counts: Mapping[str, int]
    after: tuple[str, ...]
    layer: int
    on_failure: str
    wait_signal: str | None
    signal_received: bool
    delay: timedelta | None
    timeout: timedelta | None
    reasons: tuple[str, ...]
    failed: tuple[FailedMember, ...]


#: A shown state in words.
STATE_WORDS = {
    "dead_letter": "dead-lettered",
    "blocked": "blocked",
    "running": "running",
    "ready": "ready",
    "held": "waiting",
    "cancelled": "cancelled",
    "completed": "completed",
}


def node_words(node: StepNode) -> str:
    """A node's state in words: ``running`` for a single step, ``9,990 completed, 10
    dead-lettered`` for a group (most urgent first)."""
    if not node.group:
        return STATE_WORDS[node.state]
    return ", ".join(f"{node.counts[s]:,} {STATE_WORDS[s]}" for s in NODE_STATES if node.counts[s])


def shown_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """A workflow's step counts (:attr:`WorkflowStatus.counts
    <caravel.workflows.WorkflowStatus.counts>`, whose ``held`` includes ``blocked``) as the
    :data:`NODE_STATES` show them: each step in one state, ``held`` the waiting ones that are
    not blocked."""
    shown = {state: counts.get(state, 0) for state in NODE_STATES}
    shown["held"] = max(0, shown["held"] - shown["blocked"])
    return shown


def counts_words(counts: Mapping[str, int]) -> str:
    """``1 ready, 2 waiting, 1 blocked, 4 completed``: :func:`shown_counts` in words, the
    states with none left out, most urgent first."""
    shown = shown_counts(counts)
    return ", ".join(f"{shown[s]:,} {STATE_WORDS[s]}" for s in NODE_STATES if shown[s])


def wait_words(span: timedelta) -> str:
    """A wait in the largest whole unit that fits: ``3 d``, ``90 min``, ``45 s``."""
    seconds = int(span.total_seconds())
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{span.total_seconds():g} s"


def step_nodes(status: WorkflowStatus) -> list[StepNode]:
    """The nodes of ``status``'s steps, by layer (a step after those it runs after), in a
    layer in the order the store lists them."""
    members: dict[str, list[WorkflowStep]] = {}
    for one in status.steps:
        members.setdefault(one.step, []).append(one)
    by_job = {one.job_id: one for one in status.steps}
    names_after = {name: _names_after(group, by_job, name) for name, group in members.items()}
    layers = _layers(names_after)
    nodes = [
        _node(status.tenant_id, name, group, by_job, names_after[name], layers[name])
        for name, group in members.items()
    ]
    return sorted(nodes, key=lambda node: node.layer)  # stable: in a layer, as stored


def _names_after(
    group: Sequence[WorkflowStep], by_job: Mapping[UUID, WorkflowStep], name: str
) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for one in group:
        for job_id in one.after:
            before = by_job.get(job_id)
            if before is not None and before.step != name:
                seen[before.step] = None
    return tuple(seen)


def _layers(after: Mapping[str, tuple[str, ...]]) -> dict[str, int]:
    """Each name's layer: one more than the highest of the names it runs after (Kahn's order:
    no recursion, so a chain of 20,000 steps is fine). The enqueue refused cycles; a name left
    on one anyway is put in layer 0 rather than lost."""
    waiting = {name: len(before) for name, before in after.items()}
    following: dict[str, list[str]] = {name: [] for name in after}
    for name, before in after.items():
        for b in before:
            following[b].append(name)
    layer = dict.fromkeys(after, 0)
    ready = [name for name, n in waiting.items() if n == 0]
    while ready:
        name = ready.pop()
        for child in following[name]:
            layer[child] = max(layer[child], layer[name] + 1)
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    return layer


def _node(
    tenant_id: str,
    name: str,
    group: Sequence[WorkflowStep],
    by_job: Mapping[UUID, WorkflowStep],
    after: tuple[str, ...],
    layer: int,
) -> StepNode:
    first = group[0]
    counts = dict.fromkeys(NODE_STATES, 0)
    for one in group:
        counts[step_shown_state(one)] += 1
    state = next(s for s in NODE_STATES if counts[s])
    failed = tuple(
        FailedMember(one.job_id, one.queue, tenant_id, one.step, one.index, one.state)
        for one in group
        if one.state in _FAILED
    )
    return StepNode(
        step=name,
        group=first.index is not None,
        members=len(group),
        job_id=first.job_id if first.index is None else None,
        queue=first.queue,
        job_type=first.job_type,
        state=state,
        counts=counts,
        after=after,
        layer=layer,
        on_failure=first.on_failure,
        wait_signal=first.wait_signal,
        signal_received=first.signal_received,
        delay=first.delay,
        timeout=first.timeout,
        reasons=_reasons(group, counts, by_job),
        failed=failed,
    )


#: How many failed or unfinished dependencies a reason names before it says "and N more".
_NAMED = 3


def _labels(steps: Sequence[WorkflowStep], with_state: bool) -> str:
    def one(step: WorkflowStep) -> str:
        label = step.step if step.index is None else f"{step.step}[{step.index}]"
        return f"{label} ({STATE_WORDS[step_shown_state(step)]})" if with_state else label

    named = ", ".join(one(s) for s in steps[:_NAMED])
    more = len(steps) - _NAMED
    return named if more <= 0 else f"{named} and {more} more"


def _dependencies(
    group: Sequence[WorkflowStep], by_job: Mapping[UUID, WorkflowStep], keep: tuple[str, ...]
) -> list[WorkflowStep]:
    """The distinct dependencies of the group's waiting members whose state is in ``keep``."""
    found: dict[UUID, WorkflowStep] = {}
    for one in group:
        if not (one.held or one.blocked):
            continue
        for job_id in one.after:
            before = by_job.get(job_id)
            if before is not None and before.state in keep:
                found.setdefault(job_id, before)
    return list(found.values())


def _reasons(
    group: Sequence[WorkflowStep], counts: Mapping[str, int], by_job: Mapping[UUID, WorkflowStep]
) -> tuple[str, ...]:
    """Why the node's members are not running (or did not complete), in the order an
    operator acts on them."""
    first = group[0]
    reasons: list[str] = []
    if counts["dead_letter"]:
        who = "" if len(group) == 1 else f"{counts['dead_letter']} of {len(group)} members "
        reasons.append(f"{who}dead-lettered; replaying resumes the steps it stopped")
    if counts["blocked"]:
        failed = _dependencies(group, by_job, _FAILED)
        who = "" if len(group) == 1 else f"{counts['blocked']} of {len(group)} members "
        if failed:
            replayable = any(f.state == "dead_letter" for f in failed)
            what = (
                f"{_labels(failed, False)} was {STATE_WORDS[failed[0].state]}"
                if len(failed) == 1
                else f"{len(failed)} dependencies failed: {_labels(failed, True)}"
            )
            then = (
                f"replay {'it' if len(failed) == 1 else 'the dead-lettered'} to resume"
                if replayable
                else "a cancelled step does not run again"
            )
            reasons.append(f"{who}blocked: {what}; {then} (on_failure is stop)")
        else:
            reasons.append(f"{who}blocked: a dependency failed (on_failure is stop)")
    if counts["held"]:
        unfinished = _dependencies(group, by_job, ("ready", "running"))
        if unfinished:
            reasons.append(f"waits for {_labels(unfinished, True)}")
        wanted = first.wait_signal
        if wanted is not None and not first.signal_received:
            reasons.append(_signal_words(first, wanted))
    if first.delay is not None and (counts["held"] or counts["ready"]):
        reasons.append(
            f"timer: runs no earlier than {wait_words(first.delay)} after its dependencies finished"
        )
    return tuple(reasons)


def _signal_words(step: WorkflowStep, wanted: str) -> str:
    """What a step waiting for signal ``wanted`` waits for, and what its timeout does."""
    if step.timeout is None:
        return f"waits for signal {wanted!r}"
    limit = wait_words(step.timeout)
    if step.held:
        return (
            f"waits for signal {wanted!r}, at most {limit} after its dependencies finish "
            "(then it runs timed out)"
        )
    return (
        f"waits for signal {wanted!r}: its dependencies finished, so it runs timed out "
        f"{limit} after that unless the signal comes first"
    )
