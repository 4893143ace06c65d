"""Gauges of what the database holds (queue depth per state, the oldest ready job's age, how
limited queues stand against their limits, pending outbox intents), published through
OpenTelemetry's observable gauges from the last snapshot a collector read. Like
:mod:`caravel.telemetry`, a leaf that takes plain values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from opentelemetry import metrics

from caravel.telemetry import meter

__all__ = ["LimitSnapshot", "OutboxGauge", "QueueGauges", "queue_gauges", "record_outbox_pending"]


@dataclass(frozen=True, slots=True)
class LimitSnapshot:
    """One limited queue as the gauges take it: its caps (``None``: no such cap), its jobs
    running, and its ready jobs waiting because of a limit; its rates (``None``: no such cap)
    and the weight its starts used within the window ending now (``None``: no rate)."""

    concurrency: int | None
    per_key: int | None
    running: int
    waiting: int
    rate: int | None = None
    rate_per_key: int | None = None
    rate_used: int | None = None


# ----- queue depth, read from the database ---------------------------------------------------


class QueueGauges:
    """Observable gauges for queue depth per state and the age of the oldest ready job.

    The gauges report the last snapshot given to :meth:`update`: per queue, the count of jobs in
    each state, and how long its oldest due job has waited (in seconds). One collector per
    deployment (a worker with ``WorkerOptions(queue_metrics_interval=...)``) is enough, so the
    database is not queried by every process. Use :func:`queue_gauges` for the process-wide
    instance.
    """

    def __init__(self) -> None:
        self.depths: dict[str, dict[str, int]] = {}
        self.oldest_ready_age: dict[str, float] = {}
        self.limits: dict[str, LimitSnapshot] = {}
        meter.create_observable_gauge(
            "caravel.queue.depth",
            callbacks=[self._depth],
            unit="{job}",
            description="Jobs per queue and state (ready, delayed, held, running, expired, "
            "dead_letter, completed)",
        )
        meter.create_observable_gauge(
            "caravel.queue.oldest_ready_age",
            callbacks=[self._age],
            unit="s",
            description="How long the oldest due job of each queue has waited",
        )
        # Per queue only, never per partition key: keys are tenants or payload values, as many
        # as the application has, and each would be a time series of its own.
        meter.create_observable_gauge(
            "caravel.queue.limit.max",
            callbacks=[self._cap],
            unit="{job}",
            description="The caps of each limited queue: concurrency overall (concurrency) "
            "and per partition key (per_key), the rate's weight per period overall (rate) and "
            "per partition key (rate_per_key)",
        )
        meter.create_observable_gauge(
            "caravel.queue.limit.used",
            callbacks=[self._used],
            unit="{weight}",
            description="The weight of each rate-limited queue's job starts within its rate's "
            "window ending now, as its rate counts them",
        )
        meter.create_observable_gauge(
            "caravel.queue.limit.running",
            callbacks=[self._running],
            unit="{job}",
            description="Jobs of each limited queue running with a live lease, as its "
            "concurrency limit counts them",
        )
        meter.create_observable_gauge(
            "caravel.queue.limit.waiting",
            callbacks=[self._waiting],
            unit="{job}",
            description="Ready, due jobs of each limited queue that cannot start now because "
            "of a limit",
        )

    def update(
        self, depths: Mapping[str, Mapping[str, int]], oldest_ready_age: Mapping[str, float]
    ) -> None:
        self.depths = {queue: dict(states) for queue, states in depths.items()}
        self.oldest_ready_age = dict(oldest_ready_age)

    def update_limits(self, limits: Mapping[str, LimitSnapshot]) -> None:
        """Replace the limited queues' snapshot (a queue no longer limited goes)."""
        self.limits = dict(limits)

    def _cap(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        for queue, snapshot in self.limits.items():
            caps = (
                ("concurrency", snapshot.concurrency),
                ("per_key", snapshot.per_key),
                ("rate", snapshot.rate),
                ("rate_per_key", snapshot.rate_per_key),
            )
            for kind, cap in caps:
                if cap is not None:
                    yield metrics.Observation(
                        cap, {"messaging.destination.name": queue, "caravel.limit": kind}
                    )

    def _running(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        for queue, snapshot in self.limits.items():
            yield metrics.Observation(snapshot.running, {"messaging.destination.name": queue})

    def _used(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        for queue, snapshot in self.limits.items():
            if snapshot.rate_used is not None:
                yield metrics.Observation(
                    snapshot.rate_used,
                    {"messaging.destination.name": queue, "caravel.limit": "rate"},
                )

    def _waiting(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        for queue, snapshot in self.limits.items():
            yield metrics.Observation(
                snapshot.waiting,
                {"messaging.destination.name": queue, "caravel.limit": "concurrency"},
            )

    def _depth(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        for queue, states in self.depths.items():
            for state, count in states.items():
                yield metrics.Observation(
                    count, {"messaging.destination.name": queue, "caravel.state": state}
                )

    def _age(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        for queue, age in self.oldest_ready_age.items():
            yield metrics.Observation(age, {"messaging.destination.name": queue})


_gauges: QueueGauges | None = None


def queue_gauges() -> QueueGauges:
    """The process-wide queue gauges (created, and registered with the meter, on first use)."""
    global _gauges
    if _gauges is None:
        _gauges = QueueGauges()
    return _gauges


class OutboxGauge:
    """``caravel.outbox.pending``: intents not yet dispatched, as the relay last counted them."""

    def __init__(self) -> None:
        self.pending: dict[str, int] = {}
        meter.create_observable_gauge(
            "caravel.outbox.pending",
            callbacks=[self._observe],
            unit="{intent}",
            description="Outbox intents not yet dispatched, per outbox table",
        )

    def _observe(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        for table, count in self.pending.items():
            yield metrics.Observation(count, {"caravel.outbox.table": table})


_outbox_gauge: OutboxGauge | None = None


def record_outbox_pending(table: str, count: int) -> None:
    global _outbox_gauge
    if _outbox_gauge is None:
        _outbox_gauge = OutboxGauge()
    _outbox_gauge.pending[table] = count
