"""Pausing queues in the SQL stores: the statements over ``caravel_queues`` and the three
operations that run them, shared by every dialect.

A pause is one upsert that sets ``paused_at`` only where it is not set yet, so two operators
pausing at once both succeed and exactly one of them is told it changed anything; a resume
clears it. The row stays after a resume (``paused_at`` NULL), which keeps the table as small as
the set of queues anyone ever paused. Dialects supply their INSERT construct (it must offer
``ON CONFLICT``) and may add statements that announce the change in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from caravel.store.protocol import PausedQueue
from caravel.store.schema import queues
from caravel.store.transactions import ConnectionT, SqlTransactions

__all__ = ["PausingStore", "list_paused", "pause", "resume"]


def pause(insert: Any) -> Any:
    """Pause ``b_queue`` at ``b_now`` unless paused already; returns the queue's name only when
    this statement changed it. ``insert`` is the dialect's ``insert(queues)``."""
    values = insert.values(
        queue=sa.bindparam("b_queue", type_=queues.c.queue.type),
        paused_at=sa.bindparam("b_now", type_=sa.BigInteger()),
        updated_at=sa.bindparam("b_now", type_=sa.BigInteger()),
    )
    return values.on_conflict_do_update(
        index_elements=[queues.c.queue],
        set_={"paused_at": values.excluded.paused_at, "updated_at": values.excluded.updated_at},
        where=queues.c.paused_at.is_(None),
    ).returning(queues.c.queue)


def resume() -> sa.Update:
    """Resume ``b_queue`` at ``b_now`` if it is paused; returns its name when it was."""
    return (
        sa.update(queues)
        .where(
            queues.c.queue == sa.bindparam("b_queue", type_=queues.c.queue.type),
            queues.c.paused_at.is_not(None),
        )
        .values(paused_at=None, updated_at=sa.bindparam("b_now", type_=sa.BigInteger()))
        .returning(queues.c.queue)
    )


def list_paused() -> sa.Select[Any]:
    """Every paused queue with when it was paused, by name."""
    return (
        sa.select(queues.c.queue, queues.c.paused_at)
        .where(queues.c.paused_at.is_not(None))
        .order_by(queues.c.queue)
    )


class PausingStore(SqlTransactions[ConnectionT]):
    """The pause operations of a SQL store (:class:`~caravel.store.base.SqlStore` has them)."""

    def _queues_insert(self) -> Any:
        """The dialect's INSERT into ``caravel_queues``, with ``on_conflict_do_update``."""
        raise NotImplementedError

    def _queue_changed(self) -> Sequence[Any]:
        """Statements (bound by ``b_queue``) that tell listening workers, when the transaction
        commits, that the queue's pause changed; by default none (workers poll)."""
        return ()

    async def queue_pause(self, queue: str, now: int) -> bool:
        return await self._change("queue_pause", "pause", queue, now)

    async def queue_resume(self, queue: str, now: int) -> bool:
        return await self._change("queue_resume", "resume", queue, now)

    async def _change(self, operation: str, kind: str, queue: str, now: int) -> bool:
        build = (lambda: pause(self._queues_insert())) if kind == "pause" else resume
        stmt = self._statement(f"queue_{kind}", build)
        params = {"b_queue": queue, "b_now": now}
        async with self._write(operation) as conn:
            changed = (await conn.execute(stmt, params)).scalar_one_or_none() is not None
            if changed:
                for announce in self._queue_changed():
                    await conn.execute(announce, {"b_queue": queue})
        return changed

    async def queue_list_paused(self) -> list[PausedQueue]:
        stmt = self._statement("queue_list_paused", list_paused)
        async with self._read("queue_list_paused") as conn:
            rows = (await conn.execute(stmt)).all()
        return [PausedQueue(row.queue, row.paused_at) for row in rows]
