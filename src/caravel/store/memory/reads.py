"""The in-memory store's reads: what :class:`MemoryReader` offers, and all an
:func:`~caravel.store.open_reader` on a ``memory://`` URL gets. It has no write operation at
all, so it is read-only by construction rather than by a database's refusal."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from uuid import UUID

from caravel.attempts import AttemptRecord
from caravel.errors import StoreError
from caravel.jobs import JobState, JobStatus
from caravel.migrations import HEAD
from caravel.store.limited import checked_usage, key_startable, waiting
from caravel.store.memory.tables import JobRow, Tables, partition_of
from caravel.store.protocol import (
    JobFilter,
    JobRef,
    KeyUsage,
    PausedQueue,
    QueueCounts,
    QueueLimit,
    QueueLimitUsage,
    QueueSignal,
    ScheduleState,
    SignalQuery,
    ThroughputBucket,
    ThroughputQuery,
    WorkerRecord,
    shown_state,
)
from caravel.store.rows import attempt_from_row, status_from_row, worker_from_row

__all__ = ["MemoryReader"]

_FINISHED = (JobState.COMPLETED.value, JobState.DEAD_LETTER.value)
_PRUNED = JobState.PRUNED.value
_RUNNING = JobState.RUNNING.value
_READY = JobState.READY.value
#: As many workers as the SQL listing returns at most.
_WORKER_LIST_LIMIT = 500


def _limit_usage(tables: Tables, limit: QueueLimit, now: int, keys: int) -> QueueLimitUsage:
    """How ``limit``'s queue stands against it at ``now`` (``limited.usage_by_key`` in
    Python)."""
    running: Counter[str] = Counter()
    ready: Counter[str] = Counter()
    for row in tables.live_rows(limit.queue):
        if row.state == _RUNNING and row.available_at is not None and row.available_at > now:
            running[partition_of(row)] += 1
        elif row.state == _READY and row.due_at <= now:
            ready[partition_of(row)] += 1
    startable = {key: key_startable(limit.per_key, running[key], ready[key]) for key in ready}
    total = running.total()
    usage = QueueLimitUsage(
        limit, total, waiting(limit, total, ready.total(), sum(startable.values()))
    )
    if limit.rate_period_ms is not None:
        since = now - limit.rate_period_ms
        log = tables.starts.get(limit.queue, [])
        used = sum(weight for at, _, weight in log if since < at <= now)
        usage = replace(usage, rate_used=used)
    if limit.per_key is None:
        return usage
    found = [
        KeyUsage(key, running[key], ready[key] - startable.get(key, 0))
        for key in running.keys() | ready.keys()
    ]
    found = [key for key in found if key.running or key.waiting]
    found.sort(key=lambda key: (-key.running, -key.waiting, key.key))
    return replace(usage, keys=tuple(found[:keys]))


class MemoryReader:
    """Reads over one in-memory queue's :class:`~caravel.store.memory.tables.Tables`. Not
    durable: the rows live in this process only and are gone when it exits."""

    supports_listen_notify = False
    db_system = "memory"

    def __init__(self, tables: Tables) -> None:
        self._tables = tables
        self.closed = False

    @contextmanager
    def _locked(self, operation: str) -> Iterator[Tables]:
        """The tables, held for one whole operation (which makes it atomic)."""
        if self.closed:
            raise StoreError(operation, "the memory store is closed")
        with self._tables.lock:
            yield self._tables

    @staticmethod
    def _owned(tables: Tables, ref: JobRef) -> JobRow | None:
        """The one job with this id, in this queue, of this exact tenant."""
        row = tables.jobs.get(ref.job_id)
        if row is None or row.queue != ref.queue or row.tenant_id != ref.tenant_id:
            return None
        return row

    async def job_get(self, ref: JobRef) -> JobStatus | None:
        with self._locked("job_get") as tables:
            row = self._owned(tables, ref)
            return None if row is None else status_from_row(row, row.result)

    async def job_get_payload(self, ref: JobRef) -> str | None:
        with self._locked("job_get_payload") as tables:
            row = self._owned(tables, ref)
            return None if row is None or row.state == _PRUNED else row.payload

    async def job_get_result(self, ref: JobRef) -> str | None:
        with self._locked("job_get_result") as tables:
            row = self._owned(tables, ref)
            return None if row is None else row.result

    async def job_attempts(self, ref: JobRef) -> list[AttemptRecord] | None:
        with self._locked("job_attempts") as tables:
            row = self._owned(tables, ref)
            if row is None:
                return None
            history = sorted(tables.attempts.get(row.id, ()), key=lambda r: r.lease_token)
            return [attempt_from_row(record) for record in history]

    async def job_list(self, where: JobFilter) -> list[JobStatus]:
        with self._locked("job_list") as tables:
            found = [row for row in tables.jobs.values() if _matches(row, where)]
            found.sort(key=_creation, reverse=not where.oldest_first)
            page = found[where.offset : where.offset + where.limit]
            return [status_from_row(row) for row in page]

    async def job_list_with_last_attempt(
        self, where: JobFilter
    ) -> list[tuple[JobStatus, AttemptRecord | None]]:
        with self._locked("job_list_with_last_attempt") as tables:
            found = [row for row in tables.jobs.values() if _matches(row, where)]
            found.sort(key=_creation, reverse=not where.oldest_first)
            page = found[where.offset : where.offset + where.limit]
            listed: list[tuple[JobStatus, AttemptRecord | None]] = []
            for row in page:
                history = tables.attempts.get(row.id, ())
                latest = max(history, key=lambda r: r.lease_token, default=None)
                last = None if latest is None else attempt_from_row(latest)
                listed.append((status_from_row(row), last))
            return listed

    async def queue_counts(self, queue: str | None, now: int) -> list[QueueCounts]:
        with self._locked("queue_counts") as tables:
            shown: dict[str, Counter[str]] = {}
            oldest: dict[str, int] = {}
            for row in tables.jobs.values():
                if queue is not None and row.queue != queue:
                    continue
                if row.state == _PRUNED:  # a tombstone: its queue is listed, it is not counted
                    shown.setdefault(row.queue, Counter())
                    continue
                state = shown_state(row.state, row.due_at, row.lease_expires_at, now)
                shown.setdefault(row.queue, Counter())[state] += 1
                if state == "ready" and row.due_at < oldest.get(row.queue, row.due_at + 1):
                    oldest[row.queue] = row.due_at
        return [
            QueueCounts(
                queue=name,
                ready=counted["ready"],
                delayed=counted["delayed"],
                held=counted["held"],
                running=counted["running"],
                expired=counted["expired"],
                dead_letter=counted["dead_letter"],
                completed=counted["completed"],
                oldest_ready_due_ms=oldest.get(name),
                cancelled=counted["cancelled"],
            )
            for name, counted in sorted(shown.items())
        ]

    async def queue_signal(self, query: SignalQuery) -> list[QueueSignal]:
        now = query.now
        ready: Counter[str] = Counter()
        running: Counter[str] = Counter()
        finished: Counter[str] = Counter()
        oldest: dict[str, int] = {}
        names: set[str] = set()
        with self._locked("queue_signal") as tables:
            for row in tables.jobs.values():
                if query.queue is not None and row.queue != query.queue:
                    continue
                if row.state == JobState.READY.value:
                    names.add(row.queue)
                    if row.due_at <= now:
                        ready[row.queue] += 1
                        oldest[row.queue] = min(oldest.get(row.queue, row.due_at), row.due_at)
                elif row.state == JobState.RUNNING.value:
                    names.add(row.queue)
                    if row.lease_expires_at is not None and row.lease_expires_at > now:
                        running[row.queue] += 1
                elif row.state in _FINISHED and (
                    query.finished_since <= (row.finished_at or -1) <= now
                ):
                    names.add(row.queue)
                    finished[row.queue] += 1
            serving: Counter[str] = Counter(
                name
                for worker in tables.workers.values()
                if worker.heartbeat_at >= query.seen_since and worker.stopped_at is None
                for name in set(worker.queues.split(","))
                if name and query.queue in (None, name)
            )
            limited = set(tables.limits)
        return [
            QueueSignal(
                name,
                ready[name],
                running[name],
                oldest.get(name),
                finished[name],
                serving[name],
                name in limited,
            )
            for name in sorted(names | set(serving))
        ]

    async def job_throughput(self, query: ThroughputQuery) -> list[ThroughputBucket]:
        with self._locked("job_throughput") as tables:
            done: Counter[tuple[str, int]] = Counter()
            dead: Counter[tuple[str, int]] = Counter()
            for row in tables.jobs.values():
                finished = row.finished_at
                if finished is None or not query.since <= finished < query.until:
                    continue
                if row.state not in _FINISHED:
                    continue
                if query.queue is not None and row.queue != query.queue:
                    continue
                bucket = (row.queue, (finished - query.since) // query.bucket_ms)
                (done if row.state == JobState.COMPLETED.value else dead)[bucket] += 1
        return [
            ThroughputBucket(
                queue=name,
                start=query.since + index * query.bucket_ms,
                completed=done[(name, index)],
                dead_lettered=dead[(name, index)],
            )
            for name, index in sorted({*done, *dead})
        ]

    async def worker_list(self, since: int) -> list[WorkerRecord]:
        with self._locked("worker_list") as tables:
            heard = [row for row in tables.workers.values() if row.heartbeat_at >= since]
            heard.sort(key=lambda row: (row.started_at, row.id), reverse=True)
            return [worker_from_row(row) for row in heard[:_WORKER_LIST_LIMIT]]

    async def queue_list_paused(self) -> list[PausedQueue]:
        with self._locked("queue_list_paused") as tables:
            return [PausedQueue(name, at) for name, at in sorted(tables.paused.items())]

    async def queue_limit_list(self) -> list[QueueLimit]:
        with self._locked("queue_limit_list") as tables:
            return [tables.limits[name] for name in sorted(tables.limits)]

    async def queue_limit_usage(
        self, queue: str | None, now: int, *, keys: int = 20
    ) -> list[QueueLimitUsage]:
        checked_usage(queue, keys)
        with self._locked("queue_limit_usage") as tables:
            return [
                _limit_usage(tables, tables.limits[name], now, keys)
                for name in sorted(tables.limits)
                if queue is None or name == queue
            ]

    async def schedule_list(self) -> list[ScheduleState]:
        with self._locked("schedule_list") as tables:
            return [
                ScheduleState(name, last, paused)
                for name, (last, paused) in sorted(tables.schedules.items())
            ]

    async def schema_revision(self) -> str | None:
        """Always the newest revision: the store's shape is the library's own."""
        return HEAD

    async def close(self) -> None:
        """Stop using the tables. The rows stay for any other store opened on the same name."""
        self.closed = True


def _creation(row: JobRow) -> tuple[int, UUID]:
    return (row.created_at, row.id)


def _matches(row: JobRow, where: JobFilter) -> bool:
    """Whether ``row`` passes every field ``where`` gives (as the SQL listing filters)."""
    if where.queue is not None and row.queue != where.queue:
        return False
    if where.tenant_id is not None and row.tenant_id != where.tenant_id:
        return False
    if where.state is not None and row.state != where.state.value:
        return False
    if where.job_type is not None and row.job_type != where.job_type:
        return False
    if where.tag is not None and f",{where.tag}," not in (row.tags or ""):
        return False
    if where.batch_id is not None and row.batch_id != where.batch_id:
        return False
    return where.shown is None or (
        row.state != _PRUNED  # a tombstone is in no shown state
        and shown_state(row.state, row.due_at, row.lease_expires_at, where.now) == where.shown
    )
