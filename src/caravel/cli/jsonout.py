"""The one JSON convention of the command line (docs/reference/cli.md, "JSON output"), in one
place: every command's ``--json`` document, its errors, and the worker sample's output.

A document is one JSON object on one line: snake_case keys, always present (null when there is
no value), times in UTC as ``2026-12-01T12:25:14.123Z``, durations as seconds in keys ending
``_seconds``, enums as their lower-case values, ids as strings. Errors are
``{"error": {"type", "message", "exit_code"}}`` on one line of standard error.

No Rich or Typer here, so the worker sample can use it without the command line's imports.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any
from uuid import UUID

from caravel.clock import from_ms
from caravel.jobs import JobStatus

if TYPE_CHECKING:
    from caravel.attempts import AttemptRecord
    from caravel.jobs import WorkerInfo
    from caravel.store.protocol import QueueCounts, QueueLimitUsage

__all__ = [
    "attempt_fields",
    "counts_document",
    "document",
    "emit",
    "error_document",
    "limits_fields",
    "plain",
    "record_fields",
    "timestamp",
]


def timestamp(value: datetime) -> str:
    """``2026-12-01T12:25:14.123Z``: UTC, milliseconds (truncated), a ``Z`` suffix. A naive
    value is taken as UTC, which is what the library's clocks produce."""
    utc = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def plain(value: Any) -> Any:
    """A value as the convention writes it; containers are converted element by element."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, datetime):
        return timestamp(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Enum):
        return plain(value.value)
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, Sequence):
        return [plain(item) for item in value]
    return str(value)


def document(fields: Mapping[str, Any]) -> str:
    """One JSON object on one line, in the convention."""
    return json.dumps(plain(fields), ensure_ascii=False, separators=(", ", ": "))


def emit(fields: Mapping[str, Any]) -> None:
    """Print a document on standard output: a plain write, so no console wraps or colours it."""
    sys.stdout.write(document(fields) + "\n")
    sys.stdout.flush()


def error_document(type_name: str, message: str, exit_code: int) -> str:
    """The error shape every command prints on standard error under ``--json``."""
    return document({"error": {"type": type_name, "message": message, "exit_code": exit_code}})


def limits_fields(usage: QueueLimitUsage | None) -> dict[str, Any] | None:
    """A queue's ``limits`` object: one entry per kind of limit, each with its caps and how
    the queue stands against them, null when the queue has no limit of that kind
    (``concurrency``: ``limit`` and ``per_key``, null when not capped, ``running`` and
    ``waiting``, present for a fair queue too; ``rate``: ``limit`` and ``per_key``, null when
    not capped, ``period_ms`` and the weight ``used`` within the window ending now; ``fair``:
    its ``weights``, null when the queue is not claimed fairly); null for a queue without
    limits."""
    if usage is None:
        return None
    limit = usage.limit
    concurrent = limit.concurrency is not None or limit.per_key is not None or limit.fair
    return {
        "concurrency": {
            "limit": limit.concurrency,
            "per_key": limit.per_key,
            "running": usage.running,
            "waiting": usage.waiting,
        }
        if concurrent
        else None,
        "rate": {
            "limit": limit.rate,
            "per_key": limit.rate_per_key,
            "period_ms": limit.rate_period_ms,
            "used": usage.rate_used,
        }
        if limit.rate_period_ms is not None
        else None,
        "fair": {"weights": dict(limit.weights)} if limit.fair else None,
    }


def counts_document(
    counts: Sequence[QueueCounts], usage: Sequence[QueueLimitUsage] = ()
) -> dict[str, Any]:
    """``{"queues": [...]}``: per queue the eight counts, when the oldest job that is due now
    became due (null when none is), and its ``limits`` (:func:`limits_fields`) as ``usage``
    has them."""
    limited = {u.limit.queue: u for u in usage}
    rows = []
    for c in counts:
        oldest = c.oldest_ready_due_ms
        rows.append(
            {
                "queue": c.queue,
                "ready": c.ready,
                "delayed": c.delayed,
                "held": c.held,
                "running": c.running,
                "expired": c.expired,
                "dead_letter": c.dead_letter,
                "completed": c.completed,
                "cancelled": c.cancelled,
                "oldest_ready_due_at": None if oldest is None else from_ms(oldest),
                "limits": limits_fields(limited.get(c.queue)),
            }
        )
    return {"queues": rows}


def record_fields(record: JobStatus | WorkerInfo) -> dict[str, Any]:
    """A job's status (never its payload) or a worker's registry row, field by field: the
    dataclasses' snake_case names are the document's keys. A job's ``result`` is left out:
    listings never read it, and ``jobs show`` adds it only when asked. A job's ``progress`` is
    an object (``done``, ``total``, ``note``, ``updated_at``) or null, its ``meta`` the object
    its handler set (``{}`` when none)."""
    fields = {
        name: getattr(record, name)
        for name in type(record).__dataclass_fields__
        if name not in _NOT_RECORDED
    }
    if isinstance(record, JobStatus):
        # Whether it waits for a chain step or a batch to release it (its due time is then
        # the far future, 9999-12-31), and the state in the words of the table, judged now.
        fields["held"] = record.held
        fields["shown_state"] = record.shown_state(datetime.now(UTC))
        progress = record.progress
        fields["progress"] = (
            None
            if progress is None
            else {
                "done": progress.done,
                "total": progress.total,
                "note": progress.note,
                "updated_at": progress.updated_at,
            }
        )
    return fields


def attempt_fields(record: AttemptRecord) -> dict[str, Any]:
    """One attempt record of ``jobs show``'s ``attempts``, under names that stay: its number,
    how it ended (``outcome``, an :class:`~caravel.AttemptOutcome` value), the failure
    ``category`` and ``error_class``, the ``detail`` its handler marked safe, the worker that
    ran it (``worker_id``, ``host``, ``pid``), ``claimed_at``, ``finished_at``,
    ``duration_seconds``, ``retry_at`` and the claim's ``lease_token``; null where unknown."""
    return {
        "attempt": record.attempt,
        "outcome": record.outcome,
        "category": record.category,
        "error_class": record.error_class,
        "detail": record.detail,
        "worker_id": record.worker_id,
        "host": record.host,
        "pid": record.pid,
        "claimed_at": record.claimed_at,
        "finished_at": record.finished_at,
        "duration_seconds": record.duration,
        "retry_at": record.retry_at,
        "lease_token": record.lease_token,
    }


#: Fields a record's document leaves out (the application's data, read on request only).
_NOT_RECORDED = frozenset({"result"})
