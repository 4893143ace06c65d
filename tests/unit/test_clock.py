"""Millisecond time, the hand-moved test clock, and time-ordered job ids."""

from __future__ import annotations

import asyncio
import copy
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from caravel._ids import uuid7
from caravel.clock import SystemClock, duration_ms, from_ms, to_ms_ceil
from caravel.testing import ManualClock
from tests.support import within

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
START = datetime(2030, 1, 1, tzinfo=UTC)
START_MS = 1_893_456_000_000
MAX_MS = (1 << 48) - 1

aware_datetimes = st.datetimes(
    min_value=datetime(1900, 1, 1),
    max_value=datetime(9000, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=9)), timezone(-timedelta(hours=3))]),
)


# ----- to_ms_ceil / from_ms ----------------------------------------------------------------


def test_to_ms_ceil_known_values() -> None:
    assert to_ms_ceil(EPOCH) == 0
    assert to_ms_ceil(START) == START_MS
    assert to_ms_ceil(START + timedelta(milliseconds=250)) == START_MS + 250


def test_one_microsecond_past_a_millisecond_rounds_up() -> None:
    assert to_ms_ceil(START + timedelta(microseconds=1)) == START_MS + 1
    assert to_ms_ceil(START + timedelta(microseconds=999)) == START_MS + 1
    assert to_ms_ceil(START + timedelta(microseconds=1000)) == START_MS + 1
    assert to_ms_ceil(START + timedelta(microseconds=1001)) == START_MS + 2


def test_rounding_up_before_the_epoch() -> None:
    assert to_ms_ceil(EPOCH - timedelta(microseconds=1)) == 0
    assert to_ms_ceil(EPOCH - timedelta(microseconds=1000)) == -1
    assert to_ms_ceil(EPOCH - timedelta(microseconds=1001)) == -1


def test_offset_is_honoured() -> None:
    tokyo = datetime(2030, 1, 1, 9, 0, tzinfo=timezone(timedelta(hours=9)))
    assert to_ms_ceil(tokyo) == START_MS


@given(moment=aware_datetimes)
def test_to_ms_ceil_is_the_smallest_ms_not_before_the_moment(moment: datetime) -> None:
    ms = to_ms_ceil(moment)
    assert from_ms(ms) >= moment
    assert from_ms(ms - 1) < moment


@given(ms=st.integers(min_value=-(10**12), max_value=10**14))
def test_from_ms_inverts_to_ms_ceil(ms: int) -> None:
    moment = from_ms(ms)
    assert moment.tzinfo is not None
    assert moment.utcoffset() == timedelta(0)
    assert to_ms_ceil(moment) == ms


@given(moment=aware_datetimes)
def test_whole_millisecond_times_survive_a_round_trip(moment: datetime) -> None:
    moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    assert from_ms(to_ms_ceil(moment)) == moment


def test_duration_ms_rounds_up() -> None:
    assert duration_ms(timedelta(0)) == 0
    assert duration_ms(timedelta(microseconds=1)) == 1
    assert duration_ms(timedelta(milliseconds=5)) == 5
    assert duration_ms(timedelta(milliseconds=5, microseconds=1)) == 6
    assert duration_ms(timedelta(days=7)) == 604_800_000


@given(micros=st.integers(min_value=0, max_value=10 * 365 * 86_400 * 1_000_000))
def test_duration_ms_matches_integer_ceiling(micros: int) -> None:
    assert duration_ms(timedelta(microseconds=micros)) == -((-micros) // 1000)


def test_system_clock_reads_the_wall_clock() -> None:
    before = int(datetime.now(UTC).timestamp() * 1000)
    now = SystemClock().now_ms()
    after = int(datetime.now(UTC).timestamp() * 1000)
    assert before - 1 <= now <= after + 1


# ----- ManualClock -------------------------------------------------------------------------


def _sleeper(clock: ManualClock, seconds: float) -> tuple[asyncio.Task[None], asyncio.Event]:
    woke = asyncio.Event()

    async def run() -> None:
        await clock.sleep(seconds)
        woke.set()

    return asyncio.create_task(run()), woke


async def _let_tasks_run() -> None:
    for _ in range(10):
        await asyncio.sleep(0)  # turns of the event loop, not time: the clock stands still


async def test_manual_clock_starts_at_2030_by_default_and_stands_still() -> None:
    clock = ManualClock()
    assert clock.now_ms() == START_MS
    await _let_tasks_run()
    assert clock.now_ms() == START_MS


async def test_manual_clock_custom_start_is_rounded_up() -> None:
    clock = ManualClock(START + timedelta(microseconds=1))
    assert clock.now_ms() == START_MS + 1


async def test_sleep_wakes_only_when_advanced_far_enough() -> None:
    clock = ManualClock()
    task, woke = _sleeper(clock, 10)
    await _let_tasks_run()
    assert not woke.is_set()

    await clock.advance(timedelta(seconds=9, milliseconds=999))
    assert not woke.is_set()
    assert not task.done()

    await clock.advance(timedelta(milliseconds=1))
    assert woke.is_set()  # advance lets the sleepers it woke run before returning
    await task
    assert clock.now_ms() == START_MS + 10_000


async def test_one_big_advance_wakes_the_sleeper() -> None:
    clock = ManualClock()
    task, woke = _sleeper(clock, 0.25)
    await _let_tasks_run()
    await clock.advance(timedelta(hours=1))
    assert woke.is_set()
    await task


async def test_sleepers_wake_in_deadline_order() -> None:
    clock = ManualClock()
    sleepers = {seconds: _sleeper(clock, seconds) for seconds in (1, 5, 30)}
    await _let_tasks_run()

    await clock.advance(timedelta(seconds=1))
    assert [s for s, (_, woke) in sleepers.items() if woke.is_set()] == [1]
    await clock.advance(timedelta(seconds=3))
    assert [s for s, (_, woke) in sleepers.items() if woke.is_set()] == [1]
    await clock.advance(timedelta(seconds=1))
    assert [s for s, (_, woke) in sleepers.items() if woke.is_set()] == [1, 5]
    await clock.advance(timedelta(seconds=25))
    assert all(woke.is_set() for _, woke in sleepers.values())
    await asyncio.gather(*(task for task, _ in sleepers.values()))


async def test_sleep_is_measured_from_when_it_started() -> None:
    clock = ManualClock()
    await clock.advance(timedelta(seconds=100))
    task, woke = _sleeper(clock, 2)
    await _let_tasks_run()
    await clock.advance(timedelta(seconds=1))
    assert not woke.is_set()
    await clock.advance(timedelta(seconds=1))
    assert woke.is_set()
    await task


@pytest.mark.parametrize("seconds", [0, -5])
async def test_zero_or_negative_sleep_returns_without_advancing(seconds: float) -> None:
    clock = ManualClock()
    task, woke = _sleeper(clock, seconds)
    await _let_tasks_run()
    assert woke.is_set()
    await task
    assert clock.now_ms() == START_MS


async def test_set_jumps_forward_wakes_sleepers_and_never_goes_back() -> None:
    clock = ManualClock()
    task, woke = _sleeper(clock, 60)
    await _let_tasks_run()
    await clock.set(START + timedelta(minutes=1))
    assert woke.is_set()
    await task
    assert clock.now_ms() == START_MS + 60_000

    await clock.set(START)
    assert clock.now_ms() == START_MS + 60_000


async def test_a_sleep_counts_from_its_call_even_if_an_advance_lands_before_it_starts() -> None:
    """A loop that starts its timer in a task of its own: the advance runs before that task's
    first step, and still wakes the sleep it was due to wake, not one a whole advance later."""
    clock = ManualClock()
    timer = asyncio.ensure_future(clock.sleep(10))  # asked for at START; its task has not run
    await clock.advance(timedelta(seconds=10))
    assert timer.done()
    await timer


async def test_sleep_until_wakes_at_its_deadline_however_late_it_starts() -> None:
    clock = ManualClock()
    deadline = START_MS + 5_000
    early = asyncio.ensure_future(clock.sleep_until(deadline))
    await _let_tasks_run()
    await clock.advance(timedelta(seconds=4, milliseconds=999))
    assert not early.done()
    late = asyncio.ensure_future(clock.sleep_until(deadline))  # asked for after the time moved
    await clock.advance(timedelta(milliseconds=1))
    assert early.done()
    assert late.done()
    await asyncio.gather(early, late)


async def test_sleep_until_a_moment_already_passed_returns_at_once() -> None:
    clock = ManualClock()
    await within(clock.sleep_until(START_MS))
    await within(clock.sleep_until(START_MS - 60_000))
    await within(SystemClock().sleep_until(SystemClock().now_ms() - 1))
    assert clock.now_ms() == START_MS


async def test_sleeper_can_be_cancelled() -> None:
    clock = ManualClock()
    task, woke = _sleeper(clock, 10)
    await _let_tasks_run()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await clock.advance(timedelta(seconds=10))
    assert not woke.is_set()


# ----- uuid7 -------------------------------------------------------------------------------


@given(ms=st.integers(min_value=0, max_value=MAX_MS))
def test_uuid7_version_variant_and_timestamp(ms: int) -> None:
    value = uuid7(ms)
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert value.int >> 80 == ms
    assert (value.int >> 76) & 0xF == 7
    assert (value.int >> 62) & 0b11 == 0b10
    assert str(value)[14] == "7"
    assert str(value)[19] in "89ab"


@given(ms=st.integers(min_value=0, max_value=MAX_MS))
def test_uuid7_is_an_ordinary_uuid(ms: int) -> None:
    """uuid7 builds its UUID without the constructor's range check; the result must be
    indistinguishable from one the constructor built."""
    value = uuid7(ms)
    same = uuid.UUID(int=value.int)
    assert type(value) is uuid.UUID
    assert (value, hash(value), str(value)) == (same, hash(same), str(same))
    assert repr(value) == repr(same)
    assert value.is_safe is same.is_safe
    assert uuid.UUID(str(value)) == value
    assert uuid.UUID(bytes=value.bytes) == value
    assert copy.deepcopy(value) == value
    with pytest.raises(TypeError):
        value.int = 0  # type: ignore[misc]


@given(
    first=st.integers(min_value=0, max_value=MAX_MS - 1),
    gap=st.integers(min_value=1, max_value=10**9),
)
def test_uuid7_is_time_ordered_across_increasing_milliseconds(first: int, gap: int) -> None:
    second = min(first + gap, MAX_MS)
    a, b = uuid7(first), uuid7(second)
    assert a < b
    assert a.bytes < b.bytes
    assert str(a) < str(b)
    assert a.hex < b.hex


def test_uuid7_sequence_over_time_sorts_in_creation_order() -> None:
    ids = [uuid7(START_MS + step) for step in range(200)]
    assert sorted(ids) == ids
    assert sorted(ids, key=str) == ids


def test_uuid7_within_one_millisecond_are_distinct() -> None:
    ids = {uuid7(START_MS) for _ in range(1000)}
    assert len(ids) == 1000
    assert {value.int >> 80 for value in ids} == {START_MS}


def test_uuid7_for_a_real_time_parses_back_to_that_time() -> None:
    value = uuid.UUID(str(uuid7(START_MS)))
    assert from_ms(value.int >> 80) == START
