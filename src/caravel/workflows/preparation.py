"""A built :class:`~caravel.workflows.Workflow` becomes what the store inserts: each step's
jobs validated and serialized as any enqueue's (:func:`caravel.preparation.prepare_jobs`), the
dependencies resolved to job ids, and the canonical content hash that tells a repeat of the
workflow's idempotency key from a conflict."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from caravel._ids import uuid7
from caravel.errors import ValidationError, WorkflowError
from caravel.options import QueueOptions
from caravel.preparation import prepare_jobs
from caravel.registry import JobRegistry
from caravel.store.values import NewJob
from caravel.store.workflows.records import NewStep, NewWorkflow
from caravel.workflows.builder import StepSpec, Workflow
from caravel.workflows.graph import check_graph

__all__ = ["content_hash", "prepare_workflow"]


def prepare_workflow(
    registry: JobRegistry, options: QueueOptions, workflow: Workflow, now: int
) -> NewWorkflow:
    """Validate the whole graph and serialize every step's jobs; raises
    :class:`~caravel.errors.WorkflowError` (a bad job's own error names its step too) or
    :class:`~caravel.errors.UnknownJobTypeError`. Writes nothing."""
    if not isinstance(workflow, Workflow):
        raise ValidationError("workflow", "must be a caravel.Workflow")
    specs = {spec.name: spec for spec in workflow.steps}
    check_graph(specs)
    jobs: dict[str, list[NewJob]] = {}
    for name, spec in specs.items():
        try:
            jobs[name] = prepare_jobs(registry, options, list(spec.jobs), now)
        except WorkflowError:
            raise
        except ValidationError as exc:
            raise WorkflowError(name, f"{exc.field}: {exc.rule}") from exc
    steps = [
        NewStep(
            job=job,
            step=name,
            index=index if spec.group else None,
            after=tuple(parent.id for after in spec.after for parent in jobs[after]),
            on_failure=spec.on_failure,
            wait_signal=spec.wait_for,
            delay_ms=spec.delay_ms,
            timeout_ms=spec.timeout_ms,
        )
        for name, spec in specs.items()
        for index, job in enumerate(jobs[name])
    ]
    return NewWorkflow(
        id=uuid7(now),
        tenant_id=workflow.tenant_id,
        name=workflow.name,
        idempotency_key=workflow.idempotency_key,
        content_hash=content_hash(workflow.name, specs, jobs),
        created_at=now,
        steps=steps,
    )


def content_hash(
    name: str | None, specs: Mapping[str, StepSpec], jobs: Mapping[str, list[NewJob]]
) -> str:
    """SHA-256 (hex) of the graph as canonical JSON: steps by name, each with its jobs (type,
    payload, queue and the options stored with them), dependencies and waits. Ids and times are
    left out, so the same graph built again hashes the same."""
    graph: dict[str, Any] = {"name": name, "steps": {}}
    for step in sorted(specs):
        spec = specs[step]
        graph["steps"][step] = {
            "group": spec.group,
            "after": sorted(spec.after),
            "on_failure": spec.on_failure,
            "wait_for": spec.wait_for,
            "timeout_ms": spec.timeout_ms,
            "delay_ms": spec.delay_ms,
            "jobs": [_job(job) for job in jobs[step]],
        }
    text = json.dumps(graph, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _job(job: NewJob) -> list[Any]:
    return [
        job.queue,
        job.job_type,
        job.payload,
        job.max_attempts,
        job.priority,
        job.tags,
        job.timeout_ms,
        job.partition_key,
    ]


def step_ids(workflow: NewWorkflow) -> dict[str, tuple[UUID, ...]]:
    """Each step's job ids, members of a group in order."""
    ids: dict[str, list[UUID]] = {}
    for step in workflow.steps:
        ids.setdefault(step.step, []).append(step.job.id)
    return {name: tuple(found) for name, found in ids.items()}
