"""Partition keys: which running jobs a per-key concurrency limit counts together.

A job's key is, first, its dispatch's ``partition_key``; else what its type's ``partition_by``
names: ``"tenant"`` (the default) is the job's tenant, any other value a field of the payload.
The tenant is stored as no key at all (``partition_key`` NULL, read as the tenant), so jobs of
the default cost nothing extra. Keys follow the rules of idempotency keys.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel

from caravel.errors import RegistrationError
from caravel.validation import check_identifier

__all__ = ["TENANT", "check_partition_by", "partition_key_of"]

#: ``partition_by`` for the job's tenant: the default.
TENANT = "tenant"


def _fields(payload_type: type[Any]) -> set[str]:
    if dataclasses.is_dataclass(payload_type):
        return {f.name for f in dataclasses.fields(payload_type)}
    if isinstance(payload_type, type) and issubclass(payload_type, BaseModel):
        return set(payload_type.model_fields)
    return set()


def check_partition_by(payload_type: type[Any], partition_by: object) -> str:
    """``partition_by`` for a job type: ``"tenant"`` or a field of ``payload_type``; otherwise
    :class:`~caravel.errors.RegistrationError` (field ``partition_by``)."""
    if not isinstance(partition_by, str):
        raise RegistrationError("partition_by", "must be 'tenant' or the name of a payload field")
    if partition_by != TENANT and partition_by not in _fields(payload_type):
        raise RegistrationError(
            "partition_by", "must be 'tenant' or the name of a field of the payload type"
        )
    return partition_by


def partition_key_of(partition_by: str, job: object, explicit: str | None) -> str | None:
    """The partition key to store for ``job``: ``explicit`` (already checked) when given, else
    the payload field ``partition_by`` names, checked as an idempotency key is (a string, or an
    integer written in decimal); ``None`` for the tenant. Raises
    :class:`~caravel.errors.ValidationError` naming ``partition_key``."""
    if explicit is not None:
        return explicit
    if partition_by == TENANT:
        return None
    value = getattr(job, partition_by, None)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return check_identifier(value, "partition_key")
