"""What the queue and the inspector do with a workflow once enqueued: read it (with its steps'
results for the application, without for operators), signal it and cancel it. Each checks its
arguments first and then calls the store."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from caravel.errors import ValidationError
from caravel.store.protocol import ReadStore, Store
from caravel.store.workflows.records import StepRecord
from caravel.workflows.builder import check_step_name
from caravel.workflows.status import WorkflowStatus, WorkflowStep, workflow_status, workflow_step

__all__ = ["read_workflow", "signal_payload", "step_ids_of", "workflow_signal_name"]

#: Steps and results are read this many at a time.
_PAGE = 1_000


async def read_workflow(
    store: ReadStore, workflow_id: UUID, tenant_id: str | None, *, results: bool
) -> WorkflowStatus | None:
    """The workflow of ``tenant_id`` (any when ``None``) with its steps, and with ``results``
    each step's decoded result (read page by page, one step name at a time)."""
    record = await store.workflow_get(workflow_id, tenant_id)
    if record is None:
        return None
    records: list[StepRecord] = []
    while len(records) < record.total:
        page = await store.workflow_steps(workflow_id, tenant_id, _PAGE, len(records))
        records.extend(page)
        if len(page) < _PAGE:
            break
    found: dict[tuple[str, int | None], Any] = {}
    if results and tenant_id is not None:
        for name in dict.fromkeys(step.step for step in records):
            after: int | None = None
            while True:
                batch = await store.workflow_results(workflow_id, tenant_id, name, after, _PAGE)
                for one in batch:
                    found[(name, one.index)] = (
                        None if one.result is None else json.loads(one.result)
                    )
                if len(batch) < _PAGE or batch[-1].index is None:
                    break
                after = batch[-1].index
    steps: list[WorkflowStep] = [
        workflow_step(step, found.get((step.step, step.index))) for step in records
    ]
    return workflow_status(record, steps)


async def step_ids_of(
    store: Store, workflow_id: UUID, tenant_id: str
) -> dict[str, tuple[UUID, ...]]:
    """Each step's job ids of a stored workflow (an idempotent repeat's answer)."""
    status = await read_workflow(store, workflow_id, tenant_id, results=False)
    ids: dict[str, list[UUID]] = {}
    for step in [] if status is None else status.steps:
        ids.setdefault(step.step, []).append(step.job_id)
    return {name: tuple(found) for name, found in ids.items()}


def workflow_signal_name(name: object) -> str:
    """A signal's name, checked as step names are (field ``name``)."""
    try:
        return check_step_name(name, None, "name")
    except ValidationError:
        rule = "a signal name is 1 to 128 characters of [A-Za-z0-9_.:-]"
        raise ValidationError("name", rule) from None


def signal_payload(payload: object, limit: int) -> str:
    """A signal's payload as JSON text of at most ``limit`` UTF-8 bytes, else
    :class:`ValidationError` naming ``payload``."""
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        raise ValidationError("payload", "a signal's payload is a JSON value") from None
    if len(text.encode("utf-8")) > limit:
        raise ValidationError("payload", f"a signal's payload is at most {limit} bytes of JSON")
    return text
