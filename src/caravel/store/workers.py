"""The worker registry of the SQL stores: a worker's row, its heartbeats, and the listing the
command line and the dashboard read."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from caravel.store.rows import worker_from_row, worker_row
from caravel.store.schema import workers
from caravel.store.transactions import ConnectionT, SqlTransactions
from caravel.store.values import Heartbeat, WorkerRecord

__all__ = ["WorkerRegistry", "heartbeat", "worker_list"]


def heartbeat(beat: Heartbeat) -> sa.Update:
    values: dict[str, Any] = {"heartbeat_at": beat.now, "in_flight": beat.in_flight}
    if beat.stopped:
        values["stopped_at"] = beat.now
    return sa.update(workers).where(workers.c.id == beat.worker_id).values(values)


def worker_list(since: int) -> sa.Select[Any]:
    return (
        sa.select(workers)
        .where(workers.c.heartbeat_at >= since)
        .order_by(workers.c.started_at.desc())
        .limit(500)
    )


class WorkerRegistry(SqlTransactions[ConnectionT]):
    """The ``worker_*`` operations of :class:`~caravel.store.protocol.Store`."""

    async def worker_register(self, worker: WorkerRecord) -> None:
        async with self._write("worker_register", durable=False) as conn:
            await conn.execute(sa.insert(workers).values(worker_row(worker)))

    async def worker_heartbeat(self, beat: Heartbeat) -> None:
        async with self._write("worker_heartbeat", durable=False) as conn:
            await conn.execute(heartbeat(beat))

    async def worker_list(self, since: int) -> list[WorkerRecord]:
        async with self._read("worker_list") as conn:
            rows = (await conn.execute(worker_list(since))).all()
        return [worker_from_row(row) for row in rows]
