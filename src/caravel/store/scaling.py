"""The autoscaling read of a SQL store (:meth:`~caravel.store.protocol.ReadStore.queue_signal`):
per queue, the jobs due now, the jobs running, the oldest due time, the jobs finished lately and
the workers serving it, in one read transaction of two statements (one over the jobs table, one
over the workers table), each built once per store."""

from __future__ import annotations

from collections import Counter
from typing import Any

import sqlalchemy as sa

from caravel.jobs import JobState
from caravel.store.schema import jobs, workers
from caravel.store.transactions import ConnectionT, SqlTransactions
from caravel.store.values import QueueSignal, SignalQuery

__all__ = ["ScalingReads", "signal_statement", "workers_statement"]

READY = JobState.READY.value
RUNNING = JobState.RUNNING.value
FINISHED = (JobState.COMPLETED.value, JobState.DEAD_LETTER.value)


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


class ScalingReads(SqlTransactions[ConnectionT]):
    """The ``queue_signal`` operation of :class:`~caravel.store.protocol.ReadStore`."""

    async def queue_signal(self, query: SignalQuery) -> list[QueueSignal]:
        one = query.queue is not None
        jobs_read = self._statement(f"signal_{one}", lambda: signal_statement(one))
        workers_read = self._statement("signal_workers", workers_statement)
        params: dict[str, Any] = {"b_now": query.now, "b_since": query.finished_since}
        if query.queue is not None:
            params["b_queue"] = query.queue
        async with self._read("queue_signal", single=False) as conn:
            rows = (await conn.execute(jobs_read, params)).all()
            lists = (await conn.execute(workers_read, {"b_seen": query.seen_since})).scalars()
            serving: Counter[str] = Counter(
                name for names in lists for name in set(names.split(",")) if name
            )
        return signals(rows, serving, query.queue)


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
