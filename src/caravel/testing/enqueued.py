"""Reading what a queue holds, for assertions: each job with its decoded payload, and which of
them match what a test expects."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from caravel.codec import encode_payload
from caravel.errors import ValidationError
from caravel.jobs import JobState
from caravel.queue import DatabaseQueue
from caravel.store.protocol import JobFilter, JobRef

__all__ = ["EnqueuedJob", "Expected", "read_jobs"]

_PAGE = 500


@dataclass(frozen=True, slots=True)
class EnqueuedJob:
    """A job as the store holds it, with its payload parsed from the stored JSON."""

    job_id: UUID
    queue: str
    tenant_id: str
    job_type: str
    state: JobState
    attempt: int
    due_at: datetime
    created_at: datetime
    payload: Any

    @property
    def delay(self) -> timedelta:
        """How long after it was enqueued the job was due (zero when due at once)."""
        return self.due_at - self.created_at

    def describe(self) -> str:
        """One line for a failure message: wire name, queue, tenant, state, due and payload."""
        delay = f" (+{self.delay})" if self.delay else ""
        text = json.dumps(self.payload, sort_keys=True, separators=(",", ":"))
        return (
            f"{self.job_type} queue={self.queue} tenant={self.tenant_id} state={self.state} "
            f"due={self.due_at.isoformat()}{delay} payload={text}"
        )


@dataclass(frozen=True, slots=True)
class Expected:
    """What a test looks for; every given field must match. ``payload`` is a mapping that must
    be a subset of the stored payload (nested mappings compared as subsets too) or a job value
    whose serialized form must equal it."""

    job_type: str | None = None
    payload: Any = None
    queue: str | None = None
    tenant_id: str | None = None
    state: JobState | None = None
    delay: timedelta | None = None
    due_at: datetime | None = None

    def matches(self, job: EnqueuedJob, queue: DatabaseQueue) -> bool:
        if self.delay is not None and job.delay != self.delay:
            return False
        if self.due_at is not None and job.due_at != self.due_at:
            return False
        if self.payload is None:
            return True
        if isinstance(self.payload, Mapping):
            return _is_subset(self.payload, job.payload)
        entry = queue.registry.for_job(self.payload)
        limit = queue.options.max_payload_bytes
        text = encode_payload(entry.adapter, self.payload, limit, job_type=entry.wire_name)
        return bool(job.job_type == entry.wire_name and json.loads(text) == job.payload)

    def describe(self) -> str:
        parts = [repr(self.job_type) if self.job_type is not None else "any job"]
        for name in ("queue", "tenant_id", "state", "delay", "due_at"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name}={value}")
        if isinstance(self.payload, Mapping):
            shown = json.dumps(self.payload, sort_keys=True, separators=(",", ":"), default=str)
            parts.append(f"payload containing {shown}")
        elif self.payload is not None:
            parts.append(f"payload equal to {self.payload!r}")
        return " ".join(parts)


def _is_subset(expected: Mapping[str, Any], actual: Any) -> bool:
    if not isinstance(actual, Mapping):
        return False
    for key, value in expected.items():
        if key not in actual:
            return False
        if isinstance(value, Mapping):
            if not _is_subset(value, actual[key]):
                return False
        elif actual[key] != value:
            return False
    return True


async def read_jobs(queue: DatabaseQueue, expected: Expected) -> list[EnqueuedJob]:
    """Every job the store holds that matches ``expected``'s stored fields (type, queue, tenant,
    state), oldest first, with its payload. Payload, delay and due time are left to
    :meth:`Expected.matches`."""
    found: list[EnqueuedJob] = []
    offset = 0
    while True:
        where = JobFilter(
            queue=expected.queue,
            tenant_id=expected.tenant_id,
            state=expected.state,
            job_type=expected.job_type,
            limit=_PAGE,
            offset=offset,
            oldest_first=True,
        )
        page = await queue.store.job_list(where)
        for status in page:
            ref = JobRef(status.job_id, status.queue, status.tenant_id)
            text = await queue.store.job_get_payload(ref)
            found.append(
                EnqueuedJob(
                    job_id=status.job_id,
                    queue=status.queue,
                    tenant_id=status.tenant_id,
                    job_type=status.job_type,
                    state=status.state,
                    attempt=status.attempt,
                    due_at=status.due_at,
                    created_at=status.created_at,
                    payload=None if text is None else json.loads(text),
                )
            )
        if len(page) < _PAGE:
            return found
        offset += _PAGE


def wire_name_of(queue: DatabaseQueue, job: type[Any] | str | None) -> str | None:
    """The wire name a test named, by wire name or by registered payload type."""
    if job is None or isinstance(job, str):
        return job
    for entry in queue.registry:
        if entry.payload_type is job:
            return entry.wire_name
    raise ValidationError("job", "must be a wire name or a payload type registered on the queue")
