"""The scheduler: enqueues each registered :class:`~caravel.Schedule`'s slots as they come
due, on the queue's clock. Every worker whose registry has schedules runs one (unless
``WorkerOptions(schedules=False)``); no leader is needed, because each slot's job carries the
slot's idempotency key and racing schedulers resolve to one job in the database.

One pass (:meth:`Scheduler.run_once`) reads the schedules' state once, and for each schedule
whose latest slot is newer than its recorded last slot decides by the missed policy: a slot
found within :data:`~caravel.schedules.ON_TIME_GRACE` is enqueued; an older one is enqueued
once under ``missed="latest"`` and passed over under ``"skip"``. Either way the last slot
moves to it, so missed slots never come as a burst. A paused schedule's slots are passed over.
A crash between the enqueue and the record is harmless: the next pass enqueues the same slot
again, which is a repeat of the same key.

Each schedule is handled on its own: one whose slot cannot be computed or enqueued (whatever it
raises) is logged with its name and the error's type and retried next pass, and the pass goes
on to the others; :meth:`Scheduler.run_once` then raises a
:class:`~caravel.errors.ScheduleError`. The loop (:meth:`Scheduler.run`) outlives any error.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from uuid import UUID

from caravel.clock import from_ms
from caravel.errors import IdempotencyConflictError, ScheduleError, StoreError
from caravel.queue import DatabaseQueue
from caravel.schedules import ON_TIME_GRACE, Schedule
from caravel.store.protocol import ScheduleState

__all__ = ["Scheduler", "SlotOutcome", "SlotRun"]

logger = logging.getLogger("caravel.worker")

_GRACE_MS = int(ON_TIME_GRACE.total_seconds() * 1000)
#: The longest the loop sleeps between passes, so a jump of the clock is noticed.
_MAX_SLEEP_MS = 60_000
#: After a failed pass (the database away), the least wait before the next.
_RETRY_MS = 1_000

SlotOutcome = Literal["enqueued", "repeat", "missed", "paused"]


@dataclass(frozen=True, slots=True)
class _Failure:
    """A schedule that failed in a pass: what it was doing and the exception."""

    schedule: str
    step: str
    error: Exception

    def logged(self) -> _Failure:
        # The type only: an exception's message could quote a payload or a row.
        error_type = type(self.error).__name__
        logger.error(
            "schedule %s: %s failed: %s",
            self.schedule,
            self.step,
            error_type,
            extra={"schedule": self.schedule, "error_type": error_type},
        )
        return self


@dataclass(frozen=True, slots=True)
class SlotRun:
    """What one pass did with one schedule's slot: ``enqueued`` (a new job), ``repeat`` (the
    slot's job existed: another scheduler was first), ``missed`` (passed over by the missed
    policy) or ``paused``. ``job_id`` is the slot's job where there is one."""

    schedule: str
    slot_at: datetime
    outcome: SlotOutcome
    job_id: UUID | None = None


class Scheduler:
    """Enqueues the slots of ``schedules`` on ``queue``."""

    def __init__(self, queue: DatabaseQueue, schedules: Sequence[Schedule]) -> None:
        self._queue = queue
        self._schedules = tuple(schedules)

    async def run(self) -> None:
        """A pass now and then at each next slot. Nothing it raises ends the loop: a failed
        pass (the database away) is logged and retried after a second, a failed schedule is
        logged and retried at the next pass (after a second too when the database failed)."""
        clock = self._queue.clock
        while True:
            now = clock.now_ms()
            retry = 0
            failures: list[_Failure] = []
            try:
                _, failures = await self._pass(now)
            except Exception as exc:  # the loop must outlive anything: it is every schedule's
                retry = _RETRY_MS
                logger.warning(
                    "schedule pass failed: %s",
                    type(exc).__name__,
                    extra={"error_type": type(exc).__name__},
                )
            if any(isinstance(f.error, StoreError) for f in failures):
                retry = _RETRY_MS
            # The next slot after the pass's own time: one that came due during the pass
            # gets a pass at once, not a sleep past it.
            soonest = self._soonest(now, {f.schedule for f in failures})
            after = clock.now_ms()
            latest = after + _MAX_SLEEP_MS
            wake_at = latest if soonest is None else min(soonest, latest)
            await clock.sleep_until(max(wake_at, after + retry))

    async def run_once(self) -> list[SlotRun]:
        """One pass at the clock's now: each schedule whose latest slot is not handled yet.
        Raises :class:`~caravel.errors.ScheduleError` (for the first that failed, naming all)
        once the pass is done when any schedule failed in it; the others' slots were handled.
        A database failure before any schedule is looked at raises
        :class:`~caravel.errors.StoreError`."""
        runs, failures = await self._pass(self._queue.clock.now_ms())
        if failures:
            first = failures[0]
            failed = tuple(f.schedule for f in failures)
            raise ScheduleError(
                first.schedule, first.step, type(first.error).__name__, failed=failed
            ) from first.error
        return runs

    def _soonest(self, now: int, failed: set[str]) -> int | None:
        """The earliest next slot of the schedules; one whose next slot cannot be computed is
        left out (and logged, unless it failed in the pass already)."""
        soonest: int | None = None
        for schedule in self._schedules:
            try:
                slot = schedule.next_slot(now)
            except Exception as exc:
                if schedule.name not in failed:
                    _Failure(schedule.name, "computing its next slot", exc).logged()
                continue
            soonest = slot if soonest is None else min(soonest, slot)
        return soonest

    async def _pass(self, now: int) -> tuple[list[SlotRun], list[_Failure]]:
        if not self._schedules:
            return [], []
        states = {state.name: state for state in await self._queue.store.schedule_list()}
        runs: list[SlotRun] = []
        failures: list[_Failure] = []
        for schedule in self._schedules:
            # One schedule's failure is its own: the pass goes on to the others.
            try:
                slot = schedule.latest_slot(now)
            except Exception as exc:
                failures.append(_Failure(schedule.name, "computing its slot", exc).logged())
                continue
            try:
                run = await self._slot(schedule, slot, states.get(schedule.name), now)
            except Exception as exc:
                failures.append(_Failure(schedule.name, "enqueueing its slot", exc).logged())
                continue
            if run is not None:
                runs.append(run)
        return runs, failures

    async def _slot(
        self, schedule: Schedule, slot: int, state: ScheduleState | None, now: int
    ) -> SlotRun | None:
        last = None if state is None else state.last_slot_at
        if last is not None and slot <= last:
            return None
        on_time = now - slot <= _GRACE_MS
        # A schedule seen for the first time has missed nothing: only an on-time slot runs.
        wanted = on_time or (last is not None and schedule.missed == "latest")
        run = SlotRun(schedule.name, from_ms(slot), "missed" if not wanted else "enqueued")
        if state is not None and state.paused_at is not None:
            run = SlotRun(schedule.name, from_ms(slot), "paused")
        elif wanted:
            run = await self._enqueue(schedule, slot)
        await self._queue.store.schedule_advance(schedule.name, slot, now)
        if run.outcome in ("enqueued", "missed"):
            logger.info(
                "schedule %s slot %s %s",
                schedule.name,
                run.slot_at.isoformat(),
                run.outcome,
                extra={"schedule": schedule.name, "outcome": run.outcome},
            )
        return run

    async def _enqueue(self, schedule: Schedule, slot: int) -> SlotRun:
        at = from_ms(slot)
        try:
            result = await self._queue.enqueue(schedule.job, schedule.dispatch(slot))
        except IdempotencyConflictError:
            # Another scheduler enqueued this slot with a different payload (a deploy of a
            # changed schedule racing the old one): the slot has its one job all the same.
            return SlotRun(schedule.name, at, "repeat")
        outcome: SlotOutcome = "repeat" if result.already_enqueued else "enqueued"
        return SlotRun(schedule.name, at, outcome, result.job_id)
