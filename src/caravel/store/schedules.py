"""Schedule state in the SQL stores: the statements over ``caravel_schedules`` and the
operations that run them, shared by every dialect (which supplies its INSERT construct with
``ON CONFLICT``).

Advancing is one upsert that moves ``last_slot_at`` only forward, so schedulers racing for the
same slot, or one lagging behind, never move it back. The row only saves work: a slot's job is
settled by its idempotency key whatever this table says.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from caravel.store.protocol import ScheduleState
from caravel.store.schema import schedules
from caravel.store.transactions import ConnectionT, SqlTransactions

__all__ = ["ScheduleStateStore"]

_NAME = sa.bindparam("b_name", type_=schedules.c.name.type)
_NOW = sa.bindparam("b_now", type_=sa.BigInteger())


def advance(insert: Any) -> Any:
    """Set ``b_name``'s last slot to ``b_slot`` unless it is at or past it already."""
    values = insert.values(
        name=_NAME,
        last_slot_at=sa.bindparam("b_slot", type_=sa.BigInteger()),
        paused_at=None,
        updated_at=_NOW,
    )
    current = schedules.c.last_slot_at
    return values.on_conflict_do_update(
        index_elements=[schedules.c.name],
        set_={
            "last_slot_at": values.excluded.last_slot_at,
            "updated_at": values.excluded.updated_at,
        },
        where=sa.or_(current.is_(None), current < values.excluded.last_slot_at),
    ).returning(schedules.c.name)


def pause(insert: Any) -> Any:
    """Pause ``b_name`` at ``b_now`` unless paused already; returns its name when it changed."""
    values = insert.values(name=_NAME, last_slot_at=None, paused_at=_NOW, updated_at=_NOW)
    return values.on_conflict_do_update(
        index_elements=[schedules.c.name],
        set_={"paused_at": values.excluded.paused_at, "updated_at": values.excluded.updated_at},
        where=schedules.c.paused_at.is_(None),
    ).returning(schedules.c.name)


def resume() -> sa.Update:
    """Resume ``b_name`` if it is paused; returns its name when it was."""
    return (
        sa.update(schedules)
        .where(schedules.c.name == _NAME, schedules.c.paused_at.is_not(None))
        .values(paused_at=None, updated_at=_NOW)
        .returning(schedules.c.name)
    )


def listing() -> sa.Select[Any]:
    return sa.select(schedules.c.name, schedules.c.last_slot_at, schedules.c.paused_at).order_by(
        schedules.c.name
    )


class ScheduleStateStore(SqlTransactions[ConnectionT]):
    """The schedule operations of a SQL store (:class:`~caravel.store.base.SqlStore` has them)."""

    def _schedules_insert(self) -> Any:
        """The dialect's INSERT into ``caravel_schedules``, with ``on_conflict_do_update``."""
        raise NotImplementedError

    async def schedule_advance(self, name: str, slot_at: int, now: int) -> bool:
        stmt = self._statement("schedule_advance", lambda: advance(self._schedules_insert()))
        params = {"b_name": name, "b_slot": slot_at, "b_now": now}
        async with self._write("schedule_advance") as conn:
            return (await conn.execute(stmt, params)).scalar_one_or_none() is not None

    async def schedule_pause(self, name: str, now: int) -> bool:
        stmt = self._statement("schedule_pause", lambda: pause(self._schedules_insert()))
        async with self._write("schedule_pause") as conn:
            found = await conn.execute(stmt, {"b_name": name, "b_now": now})
            return found.scalar_one_or_none() is not None

    async def schedule_resume(self, name: str, now: int) -> bool:
        stmt = self._statement("schedule_resume", resume)
        async with self._write("schedule_resume") as conn:
            found = await conn.execute(stmt, {"b_name": name, "b_now": now})
            return found.scalar_one_or_none() is not None

    async def schedule_list(self) -> list[ScheduleState]:
        stmt = self._statement("schedule_list", listing)
        async with self._read("schedule_list") as conn:
            rows = (await conn.execute(stmt)).all()
        return [ScheduleState(row.name, row.last_slot_at, row.paused_at) for row in rows]
