"""The checker of the workflow fault test: it judges a finished run from the queue database
alone (the queue's rows, the handlers' ``wf_runs`` records and the ``wf_audit`` trail of
:mod:`tests.faults.workflow_app`), and returns the run's figures or raises
:class:`WorkflowBroken` listing every violation.

What it proves, for every step of every workflow:

1. **Its end state is the expected one**: completed, except a failing step (dead-lettered) and a
   ``stop`` step after it (still held, never run).
2. **Completed exactly once**: one transition into ``completed`` in the audit trail, by the
   job's last claim (that claim's handler ran to its ``end``), each attempt started at most once
   and none beyond the attempts the queue handed out.
3. **Never started before its dependencies finished**, twice over: the snapshot the handler
   took right after its claim found every dependency completed (or, for an
   ``on_failure="continue"`` step, completed, dead-lettered or cancelled); and every
   dependency's ``finished_at`` is no later than the dependent's earliest start. Both times are
   the same machine's wall clock (the worker's ``SystemClock`` and the handler's
   ``time.time_ns``) in whole ms: a dependency's ``finished_at`` is read before its commit, the
   release is part of that commit, the claim follows it and the handler's start follows the
   claim.
4. **Released exactly once**: its step row's counter started at its number of edges, never
   went below zero, and ends at zero (one for a step a failed dependency stops); ``released_at``
   went from unset to set once and never changed after; the job's ``due_at`` left the held
   sentinel once (never for a root or a stopped step).
5. **The fan-in saw every result by step name** through the paged reader: every index once, in
   order, each the member's own result, each completed.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from caravel.limits import HELD_DUE_AT
from tests.faults.effects_app import backend_of
from tests.faults.workflow_app import connect, execute

__all__ = ["Expected", "RunRecord", "WorkflowBroken", "check_workflows"]


def _uuid(value: object) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))


@dataclass(frozen=True)
class Expected:
    """What one step should end as: ``completed``, ``dead_letter`` or ``held`` (never run);
    with ``policy`` ``continue`` its dependencies may have failed; ``detail`` is what its last
    ``end`` record must say (``None``: anything)."""

    state: str
    policy: str = "stop"
    detail: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunRecord:
    job_id: UUID
    step: str
    index: int | None
    attempt: int
    event: str
    pid: int
    at_ms: int
    lease_token: int | None
    claimed_at: int | None
    row_attempt: int | None
    deps: int | None
    deps_completed: int | None
    deps_failed: int | None
    deps_finished_max: int | None
    detail: Any


@dataclass(frozen=True)
class _Step:
    job_id: UUID
    workflow_id: UUID
    step: str
    index: int | None
    waiting: int
    released_at: int | None
    state: str
    attempt: int
    max_attempts: int
    due_at: int
    finished_at: int | None


@dataclass
class Figures:
    steps: int = 0
    workflows: int = 0
    edges: int = 0
    handler_starts: int = 0
    reruns: int = 0
    max_attempt: int = 0
    releases: int = 0
    counter_updates: int = 0
    fan_in_attempts: int = 0
    fan_in_reads: int = 0
    #: The least time from a dependency's finish to a dependent's start, in ms.
    min_release_to_start_ms: int | None = None
    states: dict[str, int] = field(default_factory=dict)


class WorkflowBroken(AssertionError):
    def __init__(self, problems: list[str], figures: Figures) -> None:
        self.problems = problems
        self.figures = figures
        shown = "\n  ".join(problems[:40])
        more = f"\n  ... and {len(problems) - 40} more" if len(problems) > 40 else ""
        super().__init__(f"{len(problems)} violation(s):\n  {shown}{more}\nfigures: {figures}")


def _read(url: str, sql: str) -> list[tuple[Any, ...]]:
    conn = connect(url)
    try:
        return [tuple(row) for row in execute(conn, backend_of(url), sql)]
    finally:
        conn.close()


def read_runs(url: str) -> list[RunRecord]:
    rows = _read(
        url,
        "SELECT job_id, step, idx, attempt, event, pid, at_ms, lease_token, claimed_at,"
        " row_attempt, deps, deps_completed, deps_failed, deps_finished_max, detail"
        " FROM wf_runs ORDER BY id",
    )
    return [
        RunRecord(
            _uuid(r[0]),
            r[1],
            r[2],
            int(r[3]),
            r[4],
            int(r[5]),
            int(r[6]),
            *(None if v is None else int(v) for v in r[7:14]),
            None if r[14] is None else json.loads(r[14]),
        )
        for r in rows
    ]


def _read_steps(url: str) -> dict[UUID, _Step]:
    rows = _read(
        url,
        "SELECT s.job_id, s.workflow_id, s.step, s.step_index, s.waiting, s.released_at,"
        " j.state, j.attempt, j.max_attempts, j.due_at, j.finished_at"
        " FROM caravel_workflow_steps s JOIN caravel_jobs j ON j.id = s.job_id",
    )
    steps = [
        _Step(
            _uuid(r[0]),
            _uuid(r[1]),
            r[2],
            r[3],
            int(r[4]),
            r[5],
            r[6],
            int(r[7]),
            int(r[8]),
            int(r[9]),
            r[10],
        )
        for r in rows
    ]
    return {s.job_id: s for s in steps}


def _read_edges(url: str) -> dict[UUID, list[UUID]]:
    into: dict[UUID, list[UUID]] = defaultdict(list)
    for parent, child in _read(url, "SELECT parent_id, child_id FROM caravel_workflow_edges"):
        into[_uuid(child)].append(_uuid(parent))
    return into


def _read_audit(url: str) -> list[tuple[Any, ...]]:
    return _read(
        url,
        "SELECT source, job_id, old_waiting, new_waiting, old_released, new_released,"
        " old_state, new_state, old_due, new_due FROM wf_audit ORDER BY id",
    )


def check_workflows(url: str, expected: dict[UUID, Expected]) -> Figures:
    """Judge a finished run whose steps should end as ``expected`` says (by job id); return its
    figures or raise :class:`WorkflowBroken`."""
    problems: list[str] = []
    steps = _read_steps(url)
    edges = _read_edges(url)
    runs = read_runs(url)
    audit = _read_audit(url)
    figures = Figures(
        steps=len(steps),
        workflows=len({s.workflow_id for s in steps.values()}),
        edges=sum(len(parents) for parents in edges.values()),
        states=dict(Counter(s.state for s in steps.values())),
    )

    # (1) end states, and no step unaccounted for.
    for job_id in expected.keys() - steps.keys():
        problems.append(f"(1) step {job_id} has no step row")
    for job_id in steps.keys() - expected.keys():
        problems.append(f"(1) step row {job_id} was not enqueued by the test")
    for job_id, want in expected.items():
        got = steps.get(job_id)
        if got is None:
            continue
        state = "held" if got.state == "ready" and got.due_at == HELD_DUE_AT else got.state
        if state != want.state:
            problems.append(
                f"(1) step {got.step}[{got.index}] {job_id} is {state}, not {want.state}"
            )

    by_job: dict[UUID, list[RunRecord]] = defaultdict(list)
    for record in runs:
        by_job[record.job_id].append(record)
    _check_runs(steps, expected, by_job, problems, figures)
    _check_order(steps, expected, edges, by_job, problems, figures)
    _check_releases(steps, expected, edges, audit, problems, figures)
    if problems:
        raise WorkflowBroken(problems, figures)
    return figures


def _name(step: _Step) -> str:
    return (
        f"{step.step}[{step.index}] {step.job_id}"
        if step.index is not None
        else (f"{step.step} {step.job_id}")
    )


def _check_runs(
    steps: dict[UUID, _Step],
    expected: dict[UUID, Expected],
    by_job: dict[UUID, list[RunRecord]],
    problems: list[str],
    figures: Figures,
) -> None:
    """(2) and (5): each attempt started at most once and within what the queue handed out; a
    completed step's last claim ran to its end; the last ``end`` says what it should."""
    for job_id in by_job.keys() - steps.keys():
        problems.append(f"(2) handler records of unknown job {job_id}")
    for job_id, step in steps.items():
        records = by_job.get(job_id, [])
        starts = [r.attempt for r in records if r.event == "start"]
        figures.handler_starts += len(starts)
        figures.reruns += max(0, len(starts) - 1)
        figures.max_attempt = max(figures.max_attempt, step.attempt)
        for attempt, n in Counter(starts).items():
            if n > 1:
                problems.append(f"(2) {_name(step)} attempt {attempt} started {n} times")
        beyond = sorted({a for a in starts if not 1 <= a <= step.attempt})
        if beyond:
            problems.append(
                f"(2) {_name(step)} started attempts {beyond}; the queue handed out "
                f"1..{step.attempt} (max {step.max_attempts})"
            )
        if step.attempt > step.max_attempts:
            problems.append(f"(2) {_name(step)} attempt {step.attempt} > {step.max_attempts}")
        want = expected.get(job_id)
        if want is None:
            continue
        ends = [r for r in records if r.event == "end"]
        if want.state == "held" and records:
            problems.append(f"(2) {_name(step)} should never run, but started {len(starts)}x")
        if step.state == "completed":
            last = [r for r in ends if r.attempt == step.attempt]
            if not last:
                problems.append(
                    f"(2) {_name(step)} completed, but its last claim (attempt {step.attempt})"
                    " never ended: a stale lease completed it"
                )
            elif want.detail is not None and last[-1].detail != want.detail:
                problems.append(
                    f"(5) {_name(step)}'s completing run saw {last[-1].detail}, not {want.detail}"
                )
        if want.detail is not None:
            wrong = [r.detail for r in ends if r.detail != want.detail]
            if wrong:
                problems.append(f"(5) {_name(step)} runs saw {wrong[:2]}, not {want.detail}")
        if want.detail is not None and "count" in want.detail:
            figures.fan_in_attempts = max(figures.fan_in_attempts, step.attempt)
            figures.fan_in_reads += len(ends)


def _check_order(
    steps: dict[UUID, _Step],
    expected: dict[UUID, Expected],
    edges: dict[UUID, list[UUID]],
    by_job: dict[UUID, list[RunRecord]],
    problems: list[str],
    figures: Figures,
) -> None:
    """(3): the snapshot each start took, and the finish times against the earliest start."""
    for job_id, step in steps.items():
        parents = edges.get(job_id, [])
        starts = [r for r in by_job.get(job_id, []) if r.event == "start"]
        policy = expected[job_id].policy if job_id in expected else "stop"
        for record in starts:
            if record.deps != len(parents):
                problems.append(
                    f"(3) {_name(step)} attempt {record.attempt} saw {record.deps} dependencies,"
                    f" the edges hold {len(parents)}"
                )
            done = (record.deps_completed or 0) + (
                (record.deps_failed or 0) if policy == "continue" else 0
            )
            if done != (record.deps or 0):
                problems.append(
                    f"(3) {_name(step)} attempt {record.attempt} started with "
                    f"{(record.deps or 0) - done} of {record.deps} dependencies unfinished"
                )
            if record.deps_finished_max is not None and record.deps_finished_max > record.at_ms:
                problems.append(
                    f"(3) {_name(step)} attempt {record.attempt} started at {record.at_ms}, "
                    f"before a dependency's finish at {record.deps_finished_max}"
                )
            if (
                record.row_attempt == record.attempt
                and record.claimed_at is not None
                and record.deps_finished_max is not None
                and record.claimed_at < record.deps_finished_max
            ):
                problems.append(
                    f"(3) {_name(step)} attempt {record.attempt} was claimed at "
                    f"{record.claimed_at}, before a dependency's finish at "
                    f"{record.deps_finished_max}"
                )
        if not starts or not parents:
            continue
        first = min(r.at_ms for r in starts)
        for parent_id in parents:
            parent = steps.get(parent_id)
            if parent is None or parent.finished_at is None:
                if policy != "continue":
                    problems.append(
                        f"(3) {_name(step)} started though its dependency {parent_id} "
                        "never finished"
                    )
                continue
            gap = first - int(parent.finished_at)
            if gap < 0:
                problems.append(
                    f"(3) {_name(step)} first started at {first}, {-gap} ms before its "
                    f"dependency {_name(parent)} finished"
                )
            if figures.min_release_to_start_ms is None or gap < figures.min_release_to_start_ms:
                figures.min_release_to_start_ms = gap


def _check_releases(
    steps: dict[UUID, _Step],
    expected: dict[UUID, Expected],
    edges: dict[UUID, list[UUID]],
    audit: list[tuple[Any, ...]],
    problems: list[str],
    figures: Figures,
) -> None:
    """(2) once into ``completed``, and (4): the counter's trail and the releases."""
    counters: dict[UUID, list[tuple[int | None, int]]] = defaultdict(list)
    set_released: Counter[UUID] = Counter()
    changed_released: Counter[UUID] = Counter()
    completions: Counter[UUID] = Counter()
    unheld: Counter[UUID] = Counter()
    for source, raw_id, old_w, new_w, old_r, new_r, old_s, new_s, old_d, new_d in audit:
        job_id = _uuid(raw_id)
        if source in ("insert", "update"):
            if source == "update":
                figures.counter_updates += old_w != new_w
            counters[job_id].append((old_w, int(new_w)))
            if old_r is None and new_r is not None:
                set_released[job_id] += 1
            elif source == "update" and old_r is not None and old_r != new_r:
                changed_released[job_id] += 1
        else:
            if new_s == "completed" and old_s != "completed":
                completions[job_id] += 1
            if (
                old_d is not None
                and int(old_d) == HELD_DUE_AT
                and (new_d is None or int(new_d) != HELD_DUE_AT)
            ):
                unheld[job_id] += 1
    for job_id, step in steps.items():
        want = expected.get(job_id)
        if want is None:
            continue
        name = _name(step)
        wanted_completions = 1 if want.state == "completed" else 0
        if completions[job_id] != wanted_completions:
            problems.append(
                f"(2) {name} entered completed {completions[job_id]} times, "
                f"not {wanted_completions}"
            )
        parents = len(edges.get(job_id, []))
        trail = counters.get(job_id, [])
        if not trail or trail[0][0] is not None:
            problems.append(f"(4) {name}: no insert of its step row in the audit trail")
            continue
        if trail[0][1] != parents:
            problems.append(f"(4) {name} started waiting for {trail[0][1]}, it has {parents} edges")
        lowest = min(new for _, new in trail)
        if lowest < 0:
            problems.append(f"(4) {name}'s counter went down to {lowest}")
        rises = [(old, new) for old, new in trail[1:] if old is not None and new > old]
        if rises:
            problems.append(f"(4) {name}'s counter rose: {rises[:3]}")
        held = want.state == "held"
        final = 1 if held else 0
        if parents and step.waiting != final:
            problems.append(f"(4) {name} ends waiting for {step.waiting}, not {final}")
        released = 0 if held or not parents else 1
        if parents and set_released[job_id] != released:
            problems.append(f"(4) {name}'s released_at was set {set_released[job_id]} times")
        if changed_released[job_id]:
            problems.append(f"(4) {name}'s released_at changed {changed_released[job_id]} times")
        if unheld[job_id] != released:
            problems.append(f"(4) {name} left the held sentinel {unheld[job_id]} times")
        figures.releases += set_released[job_id]
