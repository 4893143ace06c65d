"""``caravel.Schedule``: what registration refuses (naming the field and the rule), the slot
idempotency key, and which instants are slots: cron on the zone's wall clock through both
daylight-saving transitions of 2026 in Europe/Berlin, and intervals counted from the epoch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from caravel import JobRegistry, RegistrationError, Schedule
from caravel.clock import from_ms, to_ms_ceil
from caravel.schedules import slot_key
from tests.support import Add, noop


def at(*parts: int) -> int:
    return to_ms_ceil(datetime(*parts, tzinfo=UTC))  # type: ignore[misc]


def utc(ms: int) -> datetime:
    return from_ms(ms)


def berlin(cron: str) -> Schedule:
    return Schedule("nightly", Add(1), queue="default", cron=cron, timezone="Europe/Berlin")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"name": "Nightly"}, "name"),
        ({"name": ""}, "name"),
        ({"name": "n" * 65}, "name"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * * * *"}, "cron"),
        ({"cron": "@often"}, "cron"),
        ({"cron": None}, "cron"),
        ({"cron": "@daily", "every": timedelta(hours=1)}, "cron"),
        ({"cron": None, "every": timedelta(milliseconds=500)}, "every"),
        ({"cron": None, "every": 60}, "every"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"timezone": "../etc/passwd"}, "timezone"),
        ({"missed": "all"}, "missed"),
        ({"queue": "Bad Queue"}, "queue"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"priority": 101}, "priority"),
        ({"tenant_id": " "}, "tenant_id"),
        ({"tags": "one"}, "tags"),
        ({"tags": ["Not A Tag"]}, "tags"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_field(
    overrides: dict[str, object], field: str
) -> None:
    values: dict[str, object] = {"name": "nightly", "queue": "default", "cron": "30 2 * * *"}
    values.update(overrides)
    name = values.pop("name")
    with pytest.raises(RegistrationError) as caught:
        Schedule(name, Add(1), **values)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_macros_and_five_fields_are_accepted() -> None:
    for cron in ("@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@annually", "@midnight"):
        Schedule("m", Add(1), queue="default", cron=cron)
    Schedule("m", Add(1), queue="default", cron="*/15 9-17 * * mon-fri", timezone="Asia/Tokyo")


def test_the_registry_refuses_a_taken_name_and_an_unregistered_type() -> None:
    registry = JobRegistry()
    registry.register("tests.add.v1", Add, noop)
    first = registry.schedule(Schedule("nightly", Add(1), queue="default", cron="@daily"))
    assert registry.schedules == (first,)
    with pytest.raises(RegistrationError) as caught:
        registry.schedule(Schedule("nightly", Add(2), queue="default", cron="@hourly"))
    assert caught.value.field == "name"
    with pytest.raises(RegistrationError) as caught:
        registry.schedule(Schedule("other", object(), queue="default", cron="@hourly"))
    assert caught.value.field == "job"


def test_the_slot_key_is_the_slot_in_utc_to_the_millisecond() -> None:
    assert slot_key("nightly", at(2026, 3, 29, 1, 0)) == "schedule:nightly:2026-03-29T01:00:00.000Z"
    assert slot_key("n", at(2026, 1, 1) + 7) == "schedule:n:2026-01-01T00:00:00.007Z"


def test_cron_slots_follow_the_zone_wall_clock() -> None:
    schedule = berlin("30 2 * * *")
    # Winter: 02:30 CET is 01:30 UTC; summer: 02:30 CEST is 00:30 UTC.
    assert utc(schedule.next_slot(at(2026, 1, 10, 12))) == datetime(2026, 1, 11, 1, 30, tzinfo=UTC)
    assert utc(schedule.next_slot(at(2026, 7, 10, 12))) == datetime(2026, 7, 11, 0, 30, tzinfo=UTC)
    # The latest slot includes the instant itself.
    assert schedule.latest_slot(at(2026, 7, 11, 0, 30)) == at(2026, 7, 11, 0, 30)


def test_a_slot_that_does_not_exist_runs_once_when_the_clocks_jump() -> None:
    # 2026-03-29: at 02:00 CET (01:00 UTC) Berlin's clocks jump to 03:00 CEST; 02:30 never
    # happens. The slot is the first valid instant after the gap, 03:00 CEST, once.
    schedule = berlin("30 2 * * *")
    slot = schedule.next_slot(at(2026, 3, 28, 12))
    assert utc(slot) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert utc(schedule.next_slot(slot)) == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)
    assert schedule.latest_slot(at(2026, 3, 29, 1, 5)) == slot
    # Every minute inside the gap collapses into that one instant: one slot, not thirty.
    every_minute = berlin("* 2 * * *")
    gap = every_minute.next_slot(at(2026, 3, 29, 0, 59, 30))
    assert utc(gap) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert utc(every_minute.next_slot(gap)) == datetime(2026, 3, 30, 0, 0, tzinfo=UTC)


def test_a_slot_that_happens_twice_runs_at_its_first_occurrence_only() -> None:
    # 2026-10-25: at 03:00 CEST (01:00 UTC) Berlin's clocks go back to 02:00 CET; 02:30 happens
    # at 00:30 UTC and again at 01:30 UTC. The slot is the first; the next is the next day's.
    schedule = berlin("30 2 * * *")
    slot = schedule.next_slot(at(2026, 10, 24, 12))
    assert utc(slot) == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert utc(schedule.next_slot(slot)) == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)
    # During the second 02:30 the latest slot is still the first one: nothing new is due.
    assert schedule.latest_slot(at(2026, 10, 25, 1, 40)) == slot
    # Hourly: the repeated 02:00 hour is one slot (wall-clock hours, not elapsed ones).
    hourly = berlin("@hourly")
    slots = [hourly.next_slot(at(2026, 10, 24, 23, 30))]
    for _ in range(2):
        slots.append(hourly.next_slot(slots[-1]))
    assert [utc(s).hour for s in slots] == [0, 2, 3]


def test_interval_slots_count_from_the_epoch_in_utc() -> None:
    schedule = Schedule("tick", Add(1), queue="default", every=timedelta(minutes=5))
    assert schedule.latest_slot(at(2026, 3, 29, 1, 3)) == at(2026, 3, 29, 1, 0)
    assert schedule.next_slot(at(2026, 3, 29, 1, 0)) == at(2026, 3, 29, 1, 5)


def test_the_repr_leaves_the_payload_out() -> None:
    schedule = Schedule("nightly", Add(1, note="secret"), queue="default", cron="@daily")
    assert "secret" not in repr(schedule)


def test_new_york_transitions_of_2026() -> None:
    # 2026-03-08: 02:00 EST (07:00 UTC) jumps to 03:00 EDT; 02:30 runs once at the jump.
    spring = Schedule("ny", Add(1), queue="default", cron="30 2 * * *", timezone="America/New_York")
    slot = spring.next_slot(at(2026, 3, 7, 12))
    assert utc(slot) == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
    assert utc(spring.next_slot(slot)) == datetime(2026, 3, 9, 6, 30, tzinfo=UTC)
    # 2026-11-01: 02:00 EDT (06:00 UTC) goes back to 01:00 EST; 01:30 runs at 05:30 UTC only.
    fall = Schedule("ny", Add(1), queue="default", cron="30 1 * * *", timezone="America/New_York")
    slot = fall.next_slot(at(2026, 10, 31, 12))
    assert utc(slot) == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)
    assert fall.latest_slot(at(2026, 11, 1, 6, 45)) == slot  # during the second 01:30
    assert utc(fall.next_slot(slot)) == datetime(2026, 11, 2, 6, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cron", "timezone"),
    [
        ("0 9 31 6 *", "UTC"),  # 31 June
        ("0 9 31 6 *", "Europe/Berlin"),
        ("0 0 30 2 *", "UTC"),
        ("0 0 30,31 2 *", "America/New_York"),
        ("0 0 31 4,6,9,11 *", "UTC"),
        ("15 3 31 jun *", "Asia/Tokyo"),
    ],
)
def test_a_cron_that_never_matches_is_refused(cron: str, timezone: str) -> None:
    with pytest.raises(RegistrationError) as caught:
        Schedule("nightly", Add(1), queue="default", cron=cron, timezone=timezone)
    assert caught.value.field == "cron"
    assert "never matches" in caught.value.rule
    assert cron not in str(caught.value)


def test_a_cron_that_matches_only_in_some_years_is_accepted() -> None:
    leap = Schedule("leap", Add(1), queue="default", cron="0 0 29 2 *")
    assert utc(leap.next_slot(at(2026, 6, 1))) == datetime(2028, 2, 29, tzinfo=UTC)
    assert utc(leap.latest_slot(at(2026, 6, 1))) == datetime(2024, 2, 29, tzinfo=UTC)
    # 2100 is not a leap year: eight years between slots, found both ways.
    assert utc(leap.next_slot(at(2097, 1, 1))) == datetime(2104, 2, 29, tzinfo=UTC)
    assert utc(leap.latest_slot(at(2103, 1, 1))) == datetime(2096, 2, 29, tzinfo=UTC)
    # The 31st of the months that have one; a day of the month or a weekday (cron's "or").
    may = Schedule("may", Add(1), queue="default", cron="0 0 31 4,5 *")
    assert utc(may.next_slot(at(2026, 4, 1))) == datetime(2026, 5, 31, tzinfo=UTC)
    mondays = Schedule("mondays", Add(1), queue="default", cron="0 0 31 6 mon")
    assert utc(mondays.next_slot(at(2026, 6, 2))) == datetime(2026, 6, 8, tzinfo=UTC)
    # A fifth Monday in February: once in 28 or 40 years.
    rare = Schedule("rare", Add(1), queue="default", cron="0 0 * 2 1#5", timezone="Asia/Tokyo")
    assert utc(rare.next_slot(at(2026, 6, 1))) == datetime(2044, 2, 28, 15, tzinfo=UTC)
    # A wall time only ever on a spring-forward day (02:30 on 29 March 2026 in Berlin) still
    # has its slot, at the jump.
    gap = berlin("30 2 29 3 *")
    assert utc(gap.next_slot(at(2026, 3, 1))) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
