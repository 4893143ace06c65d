"""The read behind :meth:`Store.queue_limit_usage`: per partition key, the jobs running against
a queue's caps, the jobs ready, and how many of those the caps let start."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from caravel.jobs import JobState
from caravel.store.schema import jobs, partition

__all__ = ["usage_by_key"]

RUNNING = JobState.RUNNING.value
READY = JobState.READY.value


def usage_by_key(per_key: int | None) -> sa.Select[Any]:
    """Per partition key of ``b_queue`` at ``b_now``: its jobs ``running`` with a lease
    unexpired, ``ready`` and due, and, under a cap of ``per_key`` (literal SQL: a statement per
    cap, as the stores cache statements by name), how many of those it lets start
    (``startable``); read from the rows the partial claim index holds."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    is_running = sa.and_(jobs.c.state == RUNNING, jobs.c.available_at > now)
    is_ready = sa.and_(jobs.c.state == READY, jobs.c.due_at <= now)
    counted = (
        sa.select(
            partition.label("key"),
            sa.func.sum(sa.case((is_running, 1), else_=0)).label("running"),
            sa.func.sum(sa.case((is_ready, 1), else_=0)).label("ready"),
        )
        .where(
            jobs.c.queue == sa.bindparam("b_queue", type_=jobs.c.queue.type),
            jobs.c.available_at.is_not(None),
            sa.or_(is_running, is_ready),
        )
        .group_by(partition)
        .subquery("counted")
    )
    if per_key is None:
        startable: Any = counted.c.ready
    else:
        cap: Any = sa.literal_column(str(per_key))
        left = sa.case((counted.c.running >= cap, 0), else_=cap - counted.c.running)
        startable = sa.case((counted.c.ready < left, counted.c.ready), else_=left)
    return sa.select(
        counted.c.key, counted.c.running, counted.c.ready, startable.label("startable")
    )
