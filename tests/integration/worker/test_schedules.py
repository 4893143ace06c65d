"""The scheduler end to end on each database, time moved by a manual clock: exactly one job
per slot with two schedulers racing (two queues on one database, as two hosts), the missed
policies, pausing, a daylight-saving gap, a failing schedule that holds up no other, and the
worker's own scheduler loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from croniter import CroniterBadDateError

from caravel import (
    CaravelError,
    DatabaseQueue,
    JobRegistry,
    QueueWorker,
    Schedule,
    ScheduleError,
    Scheduler,
    SyncQueue,
    ValidationError,
    WorkerOptions,
)
from caravel.schedules import slot_key
from caravel.testing import ManualClock
from tests.support import Add, dispatch, inspector_of, noop, open_queue, until

START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def registry_with(*schedules: Schedule) -> JobRegistry:
    registry = JobRegistry()
    registry.register("tests.add.v1", Add, noop)
    for schedule in schedules:
        registry.schedule(schedule)
    return registry


def every_minute(missed: str = "skip") -> Schedule:
    return Schedule(
        "tick",
        Add(7),
        queue="default",
        tenant_id="tenant-a",
        cron="* * * * *",
        missed=missed,  # type: ignore[arg-type]
    )


def broken_cron(name: str) -> Schedule:
    """A schedule whose cron expression croniter cannot evaluate at run time (31 June).
    Registration refuses such an expression, so it is put in after the checks, as a croniter
    release that reads an accepted expression differently would leave it."""
    schedule = Schedule(name, Add(1), queue="default", cron="@daily")
    object.__setattr__(schedule, "cron", "0 9 31 6 *")
    return schedule


def unencodable(name: str) -> Schedule:
    """A schedule whose job cannot be serialized (a lone surrogate is no UTF-8): it fails when
    its slot is enqueued."""
    return Schedule(name, Add(1, note="\ud800"), queue="default", cron="* * * * *")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
async def two_queues(
    db_url: str, clock: ManualClock
) -> AsyncIterator[tuple[DatabaseQueue, DatabaseQueue]]:
    registry = registry_with(every_minute())
    async with (
        open_queue(db_url, registry, clock=clock) as first,
        open_queue(db_url, registry, clock=clock) as second,
    ):
        yield first, second


async def jobs_of(queue: DatabaseQueue) -> int:
    return len(await inspector_of(queue).list_jobs(queue="default", limit=1000))


async def until_jobs(queue: DatabaseQueue, count: int) -> None:
    """Return once ``queue`` has ``count`` jobs (the caller bounds the whole wait too)."""

    async def enough() -> bool:
        return await jobs_of(queue) >= count

    await until(enough, what=f"{count} jobs")


async def test_racing_schedulers_enqueue_one_job_per_slot(
    two_queues: tuple[DatabaseQueue, DatabaseQueue], clock: ManualClock
) -> None:
    first, second = two_queues
    schedulers = [Scheduler(q, q.registry.schedules) for q in two_queues]
    enqueued: list[str] = []
    for _ in range(12):
        passes = await asyncio.gather(*(s.run_once() for s in schedulers))
        runs = [run for one in passes for run in one]
        enqueued += [run.slot_at.isoformat() for run in runs if run.outcome == "enqueued"]
        # Whoever lost the race saw its slot's job already there, or nothing left to do.
        assert {run.outcome for run in runs} <= {"enqueued", "repeat"}
        assert len({run.job_id for run in runs}) == 1
        await clock.advance(MINUTE)
    assert len(enqueued) == len(set(enqueued)) == 12
    assert await jobs_of(first) == 12
    # The slot's key settles a late repeat by hand too.
    again = await first.enqueue(Add(7), dispatch(slot_key("tick", int(START.timestamp() * 1000))))
    assert again.already_enqueued
    assert (await first.store.schedule_list())[0].last_slot_at == clock.now_ms() - 60_000
    assert await jobs_of(second) == 12


@pytest.mark.parametrize("missed", ["skip", "latest"])
async def test_missed_slots_never_come_as_a_burst(
    db_url: str, clock: ManualClock, missed: str
) -> None:
    hourly = Schedule("hourly", Add(1), queue="default", cron="@hourly", missed=missed)  # type: ignore[arg-type]
    async with open_queue(db_url, registry_with(hourly), clock=clock) as queue:
        scheduler = Scheduler(queue, queue.registry.schedules)
        assert [r.outcome for r in await scheduler.run_once()] == ["enqueued"]
        # Every scheduler is down for three hours; found 30 s late, the slot is still on time.
        await clock.advance(timedelta(hours=3, seconds=30))
        (run,) = await scheduler.run_once()
        assert (run.outcome, run.slot_at) == ("enqueued", START + timedelta(hours=3))
        # Down again; found ten minutes late, the slot is missed, or run once under "latest".
        await clock.advance(timedelta(hours=2, minutes=10))
        (run,) = await scheduler.run_once()
        assert run.slot_at == START + timedelta(hours=5)
        assert run.outcome == ("missed" if missed == "skip" else "enqueued")
        assert await scheduler.run_once() == []
        assert await jobs_of(queue) == (2 if missed == "skip" else 3)
        # The next slot runs as usual.
        await clock.set(START + timedelta(hours=6))
        assert [r.outcome for r in await scheduler.run_once()] == ["enqueued"]


async def test_a_schedule_seen_first_late_has_missed_nothing(
    db_url: str, clock: ManualClock
) -> None:
    await clock.advance(timedelta(minutes=6))
    hourly = Schedule("hourly", Add(1), queue="default", cron="@hourly", missed="latest")
    registry = registry_with(hourly)
    async with open_queue(db_url, registry, clock=clock) as queue:
        (run,) = await Scheduler(queue, registry.schedules).run_once()
        assert run.outcome == "missed"  # 12:00 was six minutes ago, before it was known


async def test_a_paused_schedule_passes_its_slots_over_until_resumed(
    two_queues: tuple[DatabaseQueue, DatabaseQueue], clock: ManualClock
) -> None:
    first, second = two_queues
    scheduler = Scheduler(second, second.registry.schedules)
    assert await first.pause_schedule("tick") is True
    assert await first.pause_schedule("tick") is False
    for _ in range(3):
        assert [r.outcome for r in await scheduler.run_once()] == ["paused"]
        await clock.advance(MINUTE)
    assert await jobs_of(first) == 0
    assert await first.resume_schedule("tick") is True
    assert await first.resume_schedule("tick") is False
    # The slots passed over stay passed over; the current one runs.
    (run,) = await scheduler.run_once()
    assert (run.outcome, run.slot_at) == ("enqueued", START + 3 * MINUTE)
    assert await jobs_of(first) == 1


async def test_a_slot_in_the_spring_gap_runs_once_at_the_jump(db_url: str) -> None:
    clock = ManualClock(datetime(2026, 3, 29, 0, 55, tzinfo=UTC))
    nightly = Schedule(
        "nightly", Add(1), queue="default", cron="30 2 * * *", timezone="Europe/Berlin"
    )
    registry = registry_with(nightly)
    async with open_queue(db_url, registry, clock=clock) as queue:
        scheduler = Scheduler(queue, registry.schedules)
        runs = []
        for _ in range(20):  # 00:55 to 01:15 UTC, across the jump at 01:00 UTC
            runs += await scheduler.run_once()
            await clock.advance(MINUTE)
        # The first pass found yesterday's slot, long gone: passed over, as a new schedule's.
        assert [(r.outcome, r.slot_at) for r in runs] == [
            ("missed", datetime(2026, 3, 28, 1, 30, tzinfo=UTC)),
            ("enqueued", datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),
        ]


async def test_the_worker_runs_the_scheduler_on_the_queue_clock(
    db_url: str, clock: ManualClock
) -> None:
    registry = registry_with(every_minute())
    async with open_queue(db_url, registry, clock=clock) as queue:
        worker = QueueWorker(queue, options=WorkerOptions(poll_interval=timedelta(seconds=60)))
        running = asyncio.create_task(worker.run("default"))
        try:
            async with asyncio.timeout(10):
                await until_jobs(queue, 1)
                await clock.advance(MINUTE)
                await until_jobs(queue, 2)
        finally:
            worker.stop(immediate=True)
            await running
        off = QueueWorker(queue, options=WorkerOptions(schedules=False))
        assert off.options.schedules is False


def test_the_sync_queue_pauses_and_resumes_a_schedule(db_url: str) -> None:
    with SyncQueue(db_url, registry_with()) as queue:
        assert queue.pause_schedule("tick") is True
        assert queue.pause_schedule("tick") is False
        assert queue.resume_schedule("tick") is True
        assert queue.resume_schedule("tick") is False
        with pytest.raises(ValidationError) as caught:
            queue.pause_schedule("Not A Name")
        assert caught.value.field == "name"


async def test_two_running_workers_make_one_job_per_slot(db_url: str, clock: ManualClock) -> None:
    registry = registry_with(every_minute())
    quiet = WorkerOptions(poll_interval=timedelta(seconds=60))
    async with (
        open_queue(db_url, registry, clock=clock) as first,
        open_queue(db_url, registry, clock=clock) as second,
    ):
        workers = [QueueWorker(q, options=quiet) for q in (first, second)]
        running = [asyncio.create_task(w.run("default")) for w in workers]
        try:
            async with asyncio.timeout(20):
                for slots in range(1, 6):
                    await until_jobs(first, slots)
                    await clock.advance(MINUTE)
                await until_jobs(first, 6)
        finally:
            for worker in workers:
                worker.stop(immediate=True)
            await asyncio.gather(*running)
        assert await jobs_of(first) == 6


async def test_a_failing_schedule_holds_up_no_other_in_its_pass(
    db_url: str, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="caravel.worker")
    # Registered first: every pass reaches them before the healthy schedule.
    registry = registry_with(broken_cron("a-broken"), unencodable("b-unencodable"), every_minute())
    async with open_queue(db_url, registry, clock=clock) as queue:
        scheduler = Scheduler(queue, registry.schedules)
        for minute in (1, 2):
            with pytest.raises(ScheduleError) as caught:
                await scheduler.run_once()
            assert await jobs_of(queue) == minute  # "tick" ran in the same pass
            await clock.advance(MINUTE)
        (state,) = await queue.store.schedule_list()  # the failed ones recorded no slot
        assert state.name == "tick"
    error = caught.value
    assert (error.name, error.failed) == ("a-broken", ("a-broken", "b-unencodable"))
    assert isinstance(error.__cause__, CroniterBadDateError)
    assert str(error).startswith("schedule a-broken: computing its slot failed")
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert {(r.schedule, r.error_type) for r in logged} == {  # type: ignore[attr-defined]
        ("a-broken", "CroniterBadDateError"),
        ("b-unencodable", "ValidationError"),
    }
    assert len(logged) == 4  # each failing schedule once per pass
    # The error's type, never its message, which could hold data.
    assert "failed to find" not in caplog.text
    assert "Unicode" not in caplog.text


@pytest.mark.parametrize("make", [broken_cron, unencodable])
async def test_run_once_raises_only_caravel_errors(
    db_url: str, clock: ManualClock, make: object
) -> None:
    schedule = make("broken")  # type: ignore[operator]
    registry = registry_with(schedule)
    async with open_queue(db_url, registry, clock=clock) as queue:
        with pytest.raises(CaravelError) as caught:
            await Scheduler(queue, registry.schedules).run_once()
    assert type(caught.value).__module__ == "caravel.errors"
    assert isinstance(caught.value, ScheduleError)
    assert caught.value.name == "broken"


async def test_the_worker_s_scheduler_outlives_a_failing_schedule(
    db_url: str, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="caravel.worker")
    registry = registry_with(broken_cron("a-broken"), every_minute())
    async with open_queue(db_url, registry, clock=clock) as queue:
        worker = QueueWorker(queue, options=WorkerOptions(poll_interval=timedelta(seconds=60)))
        running = asyncio.create_task(worker.run("default"))
        try:
            async with asyncio.timeout(10):
                for slots in (1, 2, 3):
                    await until_jobs(queue, slots)
                    await clock.advance(MINUTE)
        finally:
            worker.stop(immediate=True)
            await running
    assert "loop stopped" not in caplog.text
    failed = [r for r in caplog.records if getattr(r, "schedule", None) == "a-broken"]
    assert len(failed) >= 3  # each pass tried it again
    assert {r.error_type for r in failed} == {"CroniterBadDateError"}  # type: ignore[attr-defined]
