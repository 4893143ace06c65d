"""The in-memory store's schedule state, with the rules of :mod:`caravel.store.schedules`:
the last slot only moves forward, a pause is recorded once and a resume clears it."""

from __future__ import annotations

from caravel.store.memory.reads import MemoryReader

__all__ = ["MemorySchedules"]


class MemorySchedules(MemoryReader):
    """``schedule_advance``, ``schedule_pause`` and ``schedule_resume`` over the tables."""

    async def schedule_advance(self, name: str, slot_at: int, now: int) -> bool:
        with self._locked("schedule_advance") as tables:
            row = tables.schedules.setdefault(name, [None, None])
            if row[0] is not None and row[0] >= slot_at:
                return False
            row[0] = slot_at
        return True

    async def schedule_pause(self, name: str, now: int) -> bool:
        with self._locked("schedule_pause") as tables:
            row = tables.schedules.setdefault(name, [None, None])
            if row[1] is not None:
                return False
            row[1] = now
        return True

    async def schedule_resume(self, name: str, now: int) -> bool:
        with self._locked("schedule_resume") as tables:
            row = tables.schedules.get(name)
            if row is None or row[1] is None:
                return False
            row[1] = None
        return True
