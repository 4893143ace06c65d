"""The autoscaling read of a SQL store (:meth:`~caravel.store.protocol.ReadStore.queue_signal`):
per queue, the jobs due now, the jobs running, the oldest due time, the jobs finished lately, the
workers serving it and whether it has a limits row, in one statement built once per store (the
jobs' counts, the queue lists of the workers heard from and the limited queues' names, told
apart by a ``kind`` column), run without an explicit transaction: one round trip per read."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from caravel.jobs import JobState
from caravel.store.schema import jobs, queue_limits, workers
from caravel.store.transactions import ConnectionT, SqlTransactions
from caravel.store.values import QueueSignal, SignalQuery

__all__ = ["ScalingReads", "signal_read", "signal_statement", "workers_statement"]

READY = JobState.READY.value
RUNNING = JobState.RUNNING.value
FINISHED = (JobState.COMPLETED.value, JobState.DEAD_LETTER.value)

# The kinds of rows of :func:`signal_read`.
_JOBS, _WORKERS, _LIMITED = 0, 1, 2


def _count(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
    return sa.func.coalesce(sa.func.sum(sa.case((condition, 1), else_=0)), 0)


def signal_statement(one_queue: bool) -> sa.Select[Any]:
    """Per queue (or for the queue bound as ``b_queue``): jobs due at ``b_now``, jobs with a
    lease live at ``b_now``, the oldest due time, and jobs finished from ``b_since`` to
    ``b_now``.

    Live jobs are read from the rows the partial claim index holds (``available_at IS NOT
    NULL``), so the backlog is read, never the history; finished jobs from the partial index
    over finished rows (``available_at IS NULL``), narrowed by queue and state, then by their
    finish time."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    since = sa.bindparam("b_since", type_=sa.BigInteger())
    due = sa.and_(jobs.c.state == READY, jobs.c.due_at <= now)
    live = (
        sa.select(
            jobs.c.queue.label("queue"),
            _count(due).label("ready"),
            _count(sa.and_(jobs.c.state == RUNNING, jobs.c.lease_expires_at > now)).label(
                "running"
            ),
            sa.func.min(sa.case((due, jobs.c.due_at))).label("oldest"),
            sa.literal(0, sa.BigInteger()).label("finished"),
        )
        .where(jobs.c.available_at.is_not(None))
        .group_by(jobs.c.queue)
    )
    finished = (
        jobs.c.available_at.is_(None),
        jobs.c.state.in_(FINISHED),
        jobs.c.finished_at >= since,
        jobs.c.finished_at <= now,
    )
    if one_queue:
        queue = sa.bindparam("b_queue", type_=jobs.c.queue.type)
        live = live.where(jobs.c.queue == queue)
        done = (
            sa.select(
                jobs.c.queue.label("queue"),
                sa.literal(0, sa.BigInteger()).label("ready"),
                sa.literal(0, sa.BigInteger()).label("running"),
                sa.null().label("oldest"),
                sa.func.count().label("finished"),
            )
            .where(jobs.c.queue == queue, *finished)
            .group_by(jobs.c.queue)
        )
    else:
        done = _finished_per_queue(finished)
    both = sa.union_all(live, done).subquery("parts")
    return (
        sa.select(
            both.c.queue,
            sa.func.sum(both.c.ready).label("ready"),
            sa.func.sum(both.c.running).label("running"),
            sa.func.min(both.c.oldest).label("oldest"),
            sa.func.sum(both.c.finished).label("finished"),
        )
        .group_by(both.c.queue)
        .order_by(both.c.queue)
    )


def _finished_per_queue(finished: tuple[sa.ColumnElement[bool], ...]) -> sa.Select[Any]:
    """Per queue with finished jobs, those finished in the window. The index over finished rows
    leads with the queue, which a range over the finish time alone cannot use: the queues are
    found by skipping through it (one probe per queue, as the queue counts do), then each
    queue's window is a range of it."""

    def next_queue(after: sa.ColumnElement[Any] | None) -> sa.ScalarSelect[Any]:
        found = sa.select(jobs.c.queue).where(jobs.c.available_at.is_(None))
        if after is not None:
            found = found.where(jobs.c.queue > after)
        return found.order_by(jobs.c.queue, jobs.c.state).limit(1).scalar_subquery()

    seen = sa.select(next_queue(None).label("queue")).cte("finished_queues", recursive=True)
    seen = seen.union_all(sa.select(next_queue(seen.c.queue)).where(seen.c.queue.is_not(None)))
    count = (
        sa.select(sa.func.count())
        .select_from(jobs)
        .where(jobs.c.queue == seen.c.queue, *finished)
        .scalar_subquery()
    )
    per_queue = (
        sa.select(seen.c.queue.label("queue"), count.label("finished"))
        .where(seen.c.queue.is_not(None))
        .subquery("per_queue")
    )
    return sa.select(
        per_queue.c.queue,
        sa.literal(0, sa.BigInteger()).label("ready"),
        sa.literal(0, sa.BigInteger()).label("running"),
        sa.null().label("oldest"),
        per_queue.c.finished,
    ).where(per_queue.c.finished > 0)


def workers_statement() -> sa.Select[Any]:
    """The queue lists of the workers heard from at or after ``b_seen`` that have not stopped
    (read from the heartbeat index)."""
    seen = sa.bindparam("b_seen", type_=sa.BigInteger())
    return sa.select(workers.c.queues).where(
        workers.c.heartbeat_at >= seen, workers.c.stopped_at.is_(None)
    )


def signal_read(one_queue: bool) -> sa.CompoundSelect[Any]:
    """:func:`signal_statement` (rows of kind 0), the queue lists of the workers of
    :func:`workers_statement` with how many workers have each (kind 1, the list in ``queue``,
    the count in ``ready``), and the queues with a limits row (kind 2), as one statement."""
    counts = signal_statement(one_queue).subquery("counts")
    zero = sa.literal(0, sa.BigInteger())
    jobs_rows = sa.select(
        sa.literal(_JOBS, sa.Integer()).label("kind"),
        counts.c.queue,
        counts.c.ready,
        counts.c.running,
        counts.c.oldest,
        counts.c.finished,
    )
    lists = workers_statement().subquery("serving")
    worker_rows = sa.select(
        sa.literal(_WORKERS, sa.Integer()).label("kind"),
        lists.c.queues,
        sa.func.count(),
        zero,
        sa.null(),
        zero,
    ).group_by(lists.c.queues)
    limited = sa.select(
        sa.literal(_LIMITED, sa.Integer()).label("kind"),
        queue_limits.c.queue,
        zero,
        zero,
        sa.null(),
        zero,
    )
    if one_queue:
        limited = limited.where(
            queue_limits.c.queue == sa.bindparam("b_queue", type_=jobs.c.queue.type)
        )
    return sa.union_all(jobs_rows, worker_rows, limited)


class ScalingReads(SqlTransactions[ConnectionT]):
    """The ``queue_signal`` operation of :class:`~caravel.store.protocol.ReadStore`."""

    async def queue_signal(self, query: SignalQuery) -> list[QueueSignal]:
        one = query.queue is not None
        read = self._statement(f"signal_read_{one}", lambda: signal_read(one))
        params: dict[str, Any] = {
            "b_now": query.now,
            "b_since": query.finished_since,
            "b_seen": query.seen_since,
        }
        if query.queue is not None:
            params["b_queue"] = query.queue
        async with self._read("queue_signal") as conn:
            rows = (await conn.execute(read, params)).all()
        serving: Counter[str] = Counter()
        limited: set[str] = set()
        for row in rows:
            if row.kind == _WORKERS:
                for name in set(row.queue.split(",")):
                    if name:
                        serving[name] += int(row.ready)
            elif row.kind == _LIMITED:
                limited.add(row.queue)
        found = signals([r for r in rows if r.kind == _JOBS], serving, query.queue)
        return [replace(s, limited=True) if s.queue in limited else s for s in found]


def signals(rows: Any, serving: Counter[str], queue: str | None) -> list[QueueSignal]:
    """The signals of the jobs statement's rows and the workers per queue, by queue name: a
    queue only workers serve gets zeros."""
    found = {
        row.queue: QueueSignal(
            row.queue,
            int(row.ready),
            int(row.running),
            None if row.oldest is None else int(row.oldest),
            int(row.finished),
            serving.get(row.queue, 0),
        )
        for row in rows
    }
    for name, count in serving.items():
        if name not in found and queue in (None, name):
            found[name] = QueueSignal(name, 0, 0, None, 0, count)
    return [found[name] for name in sorted(found)]
