"""Rich tables for the commands that show queue counts, jobs and workers. Times in a table are
UTC, and the column says so. (JSON documents are made in :mod:`caravel.cli.jsonout`.)

Commands import this module only when they print a table: the others, ``caravel worker``
above all, write plain lines and never load Rich."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from caravel.attempts import AttemptRecord
from caravel.jobs import JobStatus, WorkerInfo
from caravel.store.protocol import SHOWN_STATES, KeyUsage, QueueCounts, QueueLimitUsage

__all__ = [
    "attempts_table",
    "console",
    "counts_table",
    "fairness",
    "keys_table",
    "limits_table",
    "statuses_table",
    "utc",
    "workers_table",
]

#: The counts shown, in the order of the dashboard: every state a job can be shown in.
COUNT_COLUMNS = SHOWN_STATES


def utc(value: datetime) -> str:
    """A table cell's time: UTC to the second (the column title says "(UTC)")."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def counts_table(counts: Sequence[QueueCounts]) -> Table:
    table = Table(title="Queues")
    table.add_column("queue")
    for name in COUNT_COLUMNS:
        table.add_column(name.replace("_", " "), justify="right")
    for row in counts:
        table.add_row(Text(row.queue), *(str(getattr(row, name)) for name in COUNT_COLUMNS))
    return table


def _cap(value: int | None) -> str:
    return "" if value is None else str(value)


def limits_table(usage: Sequence[QueueLimitUsage]) -> Table:
    """Per limited queue: its concurrency caps (blank: none), whether it is claimed fairly and
    its weights, its jobs running, and its ready jobs waiting because of a limit; its rate and
    rate per key (blank: none), the weight used within the window ending now, and the period."""
    table = Table(title="Limits")
    table.add_column("queue")
    for name in ("concurrency", "per key"):
        table.add_column(name, justify="right")
    table.add_column("fair")
    for name in ("running", "waiting", "rate", "rate per key", "used"):
        table.add_column(name, justify="right")
    table.add_column("period", justify="right")
    for u in usage:
        table.add_row(
            Text(u.limit.queue),
            _cap(u.limit.concurrency),
            _cap(u.limit.per_key),
            fairness(u.limit.fair, u.limit.weights),
            str(u.running),
            str(u.waiting),
            _cap(u.limit.rate),
            _cap(u.limit.rate_per_key),
            _cap(u.rate_used),
            period_text(u.limit.rate_period_ms),
        )
    return table


def period_text(period_ms: int | None) -> str:
    """A rate's period in seconds (``"60 s"``); blank without a rate."""
    return "" if period_ms is None else f"{period_ms / 1000:g} s"


def fairness(fair: bool, weights: Mapping[str, int]) -> Text:
    """A fairness cell: blank when off, ``yes`` or the weights (``acme=3, b=2``) when on; a
    Text, so a key like "[bold]x" is shown as typed, never read as markup."""
    if not fair:
        return Text("")
    return Text(", ".join(f"{key}={n}" for key, n in weights.items()) or "yes")


def keys_table(queue: str, per_key: int | None, keys: Sequence[KeyUsage]) -> Table:
    """The busiest partition keys of one queue with a per-key cap."""
    table = Table(title=f"Keys of {queue} (at most {_cap(per_key)} each)")
    table.add_column("key")
    for name in ("running", "waiting"):
        table.add_column(name, justify="right")
    for k in keys:
        # A Text cell: a key like "[bold]x" is shown as typed, never read as markup.
        table.add_row(Text(k.key), str(k.running), str(k.waiting))
    return table


def _failure(status: JobStatus) -> str:
    """The failure cell: the category, and the exception class behind it when there was one."""
    category = status.last_failure or ""
    return category if status.error_class is None else f"{category} ({status.error_class})"


def statuses_table(statuses: Sequence[JobStatus]) -> Table:
    """Jobs as rows; the state column in the words of the dashboard and ``caravel status``
    (:meth:`JobStatus.shown_state <caravel.JobStatus.shown_state>`), judged now."""
    now = datetime.now(UTC)
    table = Table(title="Jobs")
    for name in ("job id", "queue", "tenant", "type", "state", "attempt"):
        table.add_column(name)
    table.add_column("priority", justify="right")
    table.add_column("created (UTC)")
    table.add_column("failure")
    table.add_column("tags")
    for s in statuses:
        cells = (
            str(s.job_id),
            s.queue,
            s.tenant_id,
            s.job_type,
            s.shown_state(now),
            f"{s.attempt}/{s.max_attempts}",
            str(s.priority),
            utc(s.created_at),
            _failure(s),
            ", ".join(s.tags),
        )
        # Text cells: a tenant id like "[bold]x" is shown as typed, never read as markup.
        table.add_row(*(Text(cell) for cell in cells))
    return table


def _blank(value: object) -> str:
    return "" if value is None else str(value)


def _seconds(record: AttemptRecord) -> str:
    duration = record.duration
    return "" if duration is None else f"{duration.total_seconds():.3f} s"


def attempts_table(records: Sequence[AttemptRecord]) -> Table:
    """A job's attempt records, oldest first: how each ended and why (the failure category,
    the exception's class and the detail its handler marked safe), which worker ran it, when,
    for how long, and when the job was due again after it. Blank where unknown."""
    # Light rules and folded cells: a long class path or worker id wraps, never cut short.
    table = Table(
        title="Attempts",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        title_justify="left",
        pad_edge=False,
        collapse_padding=True,
    )
    right = {"#", "pid", "duration"}
    for name in (
        "#",
        "outcome",
        "category",
        "error class",
        "detail",
        "worker",
        "host",
        "pid",
        "claimed (UTC)",
        "finished (UTC)",
        "duration",
        "retry at (UTC)",
    ):
        # A worker id is kept whole (it is pasted into `caravel workers`); text columns fold.
        table.add_column(
            name,
            justify="right" if name in right else "left",
            overflow="fold",
            min_width=36 if name == "worker" else None,
        )
    for r in records:
        cells = (
            str(r.attempt),
            r.outcome.value,
            _blank(r.category),
            _blank(r.error_class),
            _blank(r.detail),
            _blank(r.worker_id),
            _blank(r.host),
            _blank(r.pid),
            "" if r.claimed_at is None else utc(r.claimed_at),
            "" if r.finished_at is None else utc(r.finished_at),
            _seconds(r),
            "" if r.retry_at is None else utc(r.retry_at),
        )
        # Text cells: a host or a detail like "[bold]x" is shown as typed, never as markup.
        table.add_row(*(Text(cell) for cell in cells))
    return table


def workers_table(found: Sequence[WorkerInfo]) -> Table:
    table = Table(title="Workers")
    for name in ("state", "host", "pid", "queues", "concurrency", "in flight"):
        table.add_column(name)
    table.add_column("last heartbeat (UTC)")
    for w in found:
        table.add_row(
            Text(w.state),
            Text(w.host),
            str(w.pid),
            Text(", ".join(w.queues)),
            str(w.concurrency),
            str(w.in_flight),
            utc(w.heartbeat_at),
        )
    return table


def console(*, stderr: bool = False, width: int = 200) -> Console:
    """A console that is ``width`` wide (enough for job ids) when output goes to a file or a
    pipe, and as wide as the terminal on one."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else width, soft_wrap=stderr)
