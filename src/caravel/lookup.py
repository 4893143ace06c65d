"""How a caller names one job: its id, its queue and its exact tenant, each checked before the
store is asked. Status, payload and replay (on the queue and the inspector alike) look jobs up
this way, so a wrong tenant and an unknown id answer the same."""

from __future__ import annotations

from uuid import UUID

from caravel.errors import ValidationError
from caravel.store.protocol import JobRef
from caravel.validation import check_identifier, check_queue_name

__all__ = ["job_ref", "parse_job_id"]


def parse_job_id(value: object, field: str = "job_id") -> UUID:
    """A job (or chain, or batch) id given as a :class:`~uuid.UUID` or its text."""
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise ValidationError(field, "must be a UUID") from None


def job_ref(job_id: object, queue: object, tenant_id: object) -> JobRef:
    """The checked reference to one job; raises :class:`~caravel.errors.ValidationError`."""
    return JobRef(
        parse_job_id(job_id), check_queue_name(queue), check_identifier(tenant_id, "tenant_id")
    )
