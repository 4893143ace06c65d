"""The autoscaling signal: per queue, what an autoscaler or a scraper needs to decide how many
workers to run (jobs due now, jobs running, how long the oldest due job has waited, jobs finished
in the last minute, the workers serving the queue), and, for a queue with flow control, how it
stands against its limits per partition key.

:meth:`QueueInspector.scaling_signal <caravel.QueueInspector.scaling_signal>` reads it;
``caravel metrics`` and the ``/metrics`` endpoint write it as one JSON document
(:func:`signal_document`, what KEDA's metrics-api scaler reads) or in Prometheus's text format
(:func:`prometheus_text`). Plain values in, plain text out: no web or command-line imports.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from caravel.store.limit_values import QueueLimitUsage

__all__ = [
    "PROMETHEUS_CONTENT_TYPE",
    "QueueScaling",
    "ScalingSignal",
    "prometheus_text",
    "signal_document",
]

#: The content type of :func:`prometheus_text` (the text exposition format, version 0.0.4).
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True)
class QueueScaling:
    """One queue's signal at one moment.

    ``ready``: jobs due now (not delayed, not held for a chain or batch). ``running``: jobs
    running with a live lease. ``oldest_ready_age_seconds``: how long the oldest due job has
    waited (0 when none is due). ``finished_last_minute``: jobs completed or moved to dead
    letter within the last minute. ``workers``: worker processes serving the queue whose last
    heartbeat is recent (within the reader's ``lost_after``) and that have not stopped.
    ``limits``: how the queue stands against its concurrency limits, with its busiest partition
    keys, or ``None`` when it has no limit."""

    queue: str
    ready: int
    running: int
    oldest_ready_age_seconds: float
    finished_last_minute: int
    workers: int
    limits: QueueLimitUsage | None = None


@dataclass(frozen=True, slots=True)
class ScalingSignal:
    """Every queue's signal at one moment, by queue name."""

    queues: tuple[QueueScaling, ...]


def signal_document(signal: ScalingSignal) -> dict[str, Any]:
    """``{"queues": [...]}``: per queue its name, the five numbers, and ``limits`` (null
    without a concurrency limit): the queue's ``running`` and ``waiting`` jobs as its limit
    counts them, its caps, and ``keys``, the busiest partition keys with theirs."""
    return {"queues": [_queue_fields(q) for q in signal.queues]}


def _queue_fields(queue: QueueScaling) -> dict[str, Any]:
    usage = queue.limits
    limits = None
    if usage is not None:
        limits = {
            "concurrency": usage.limit.concurrency,
            "per_key": usage.limit.per_key,
            "running": usage.running,
            "waiting": usage.waiting,
            "keys": [
                {"key": k.key, "running": k.running, "waiting": k.waiting} for k in usage.keys
            ],
        }
    return {
        "queue": queue.queue,
        "ready": queue.ready,
        "running": queue.running,
        "oldest_ready_age_seconds": queue.oldest_ready_age_seconds,
        "finished_last_minute": queue.finished_last_minute,
        "workers": queue.workers,
        "limits": limits,
    }


#: The queue-level series: name, help, and the field each reads.
_SERIES = (
    ("caravel_queue_ready", "Jobs due now, waiting for a worker.", "ready"),
    ("caravel_queue_running", "Jobs running with a live lease.", "running"),
    (
        "caravel_queue_oldest_ready_age_seconds",
        "How long the oldest due job has waited (0 when none is due).",
        "oldest_ready_age_seconds",
    ),
    (
        "caravel_queue_finished_last_minute",
        "Jobs completed or moved to dead letter within the last minute.",
        "finished_last_minute",
    ),
    ("caravel_queue_workers", "Worker processes serving the queue, heard from lately.", "workers"),
)


def prometheus_text(signal: ScalingSignal) -> str:
    """The signal in Prometheus's text exposition format: one gauge per number, labelled by
    ``queue``; for limited queues ``caravel_queue_limit_waiting``, and per partition key
    ``caravel_partition_running`` and ``caravel_partition_waiting`` (labels ``queue`` and
    ``key``)."""
    lines: list[str] = []
    for name, text, field in _SERIES:
        lines += _gauge(
            name, text, ((_labels(queue=q.queue), getattr(q, field)) for q in signal.queues)
        )
    limited = [q for q in signal.queues if q.limits is not None]
    lines += _gauge(
        "caravel_queue_limit_waiting",
        "Due jobs of a limited queue that cannot start now because of a limit.",
        ((_labels(queue=q.queue), q.limits.waiting) for q in limited if q.limits is not None),
    )
    keyed = [(q.queue, k) for q in limited if q.limits is not None for k in q.limits.keys]
    lines += _gauge(
        "caravel_partition_running",
        "Jobs of a partition key running, in a queue with a per-key limit (busiest keys).",
        ((_labels(queue=queue, key=k.key), k.running) for queue, k in keyed),
    )
    lines += _gauge(
        "caravel_partition_waiting",
        "Due jobs of a partition key held back by its per-key limit (busiest keys).",
        ((_labels(queue=queue, key=k.key), k.waiting) for queue, k in keyed),
    )
    return "\n".join(lines) + "\n"


def _gauge(name: str, text: str, samples: Iterable[tuple[str, float]]) -> list[str]:
    lines = [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
    lines += [f"{name}{{{labels}}} {_number(value)}" for labels, value in samples]
    return lines


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def _labels(**values: str) -> str:
    return ",".join(f'{name}="{_escaped(value)}"' for name, value in values.items())


def _escaped(value: str) -> str:
    """A label value as the text format quotes it: backslash, double quote and line feed
    escaped (partition keys are the application's strings)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
