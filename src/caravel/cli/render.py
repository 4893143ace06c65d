"""Turning queue counts and job statuses into Rich tables and JSON, the same way for every
command that shows them."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from caravel.clock import from_ms
from caravel.jobs import JobStatus
from caravel.store.protocol import QueueCounts

__all__ = ["console", "counts_json", "counts_table", "status_json", "statuses_table"]

COUNT_COLUMNS = ("ready", "delayed", "running", "expired", "dead_letter", "completed")


def counts_json(counts: Sequence[QueueCounts]) -> str:
    """Per queue: the six counts, and when the oldest job that is due now became due (ISO
    8601, or null when nothing is waiting)."""
    rows = []
    for c in counts:
        row: dict[str, Any] = {name: getattr(c, name) for name in ("queue", *COUNT_COLUMNS)}
        oldest = c.oldest_ready_due_ms
        row["oldest_ready_due_at"] = None if oldest is None else _plain(from_ms(oldest))
        rows.append(row)
    return json.dumps({"queues": rows}, sort_keys=True)


def counts_table(counts: Sequence[QueueCounts]) -> Table:
    table = Table(title="Queues")
    table.add_column("queue")
    for name in COUNT_COLUMNS:
        table.add_column(name.replace("_", " "), justify="right")
    for row in counts:
        table.add_row(Text(row.queue), *(str(getattr(row, name)) for name in COUNT_COLUMNS))
    return table


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if hasattr(value, "value"):
        return value.value
    return str(value) if not isinstance(value, int | str | type(None)) else value


def status_json(status: JobStatus, payload: str | None = None) -> dict[str, Any]:
    fields = {name: _plain(getattr(status, name)) for name in JobStatus.__dataclass_fields__}
    if payload is not None:
        fields["payload"] = json.loads(payload)
    return fields


def statuses_table(statuses: Sequence[JobStatus]) -> Table:
    table = Table(title="Jobs")
    for name in ("job id", "queue", "tenant", "type", "state", "attempt", "created", "failure"):
        table.add_column(name)
    for s in statuses:
        cells = (
            str(s.job_id),
            s.queue,
            s.tenant_id,
            s.job_type,
            s.state.value,
            f"{s.attempt}/{s.max_attempts}",
            s.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            s.last_failure or "",
        )
        # Text cells: a tenant id like "[bold]x" is shown as typed, never read as markup.
        table.add_row(*(Text(cell) for cell in cells))
    return table


def console(*, stderr: bool = False) -> Console:
    """A console that is wide enough for job ids when output goes to a file or a pipe."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 200, soft_wrap=stderr)
