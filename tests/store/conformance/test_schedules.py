"""``schedule_advance``, ``schedule_pause``, ``schedule_resume`` and ``schedule_list``: the last
slot only moves forward (so racing schedulers never move it back), a pause is recorded once
and a resume clears it, and every store on the same queue, the reader too, sees the same."""

from __future__ import annotations

from caravel.store.protocol import ReadStore, ScheduleState, Store
from tests.store.conformance.builders import T0


async def test_no_schedule_has_state_at_first(store: Store, reader: ReadStore) -> None:
    assert await store.schedule_list() == []
    assert await reader.schedule_list() == []


async def test_the_last_slot_only_moves_forward(store: Store, second_store: Store) -> None:
    assert await store.schedule_advance("nightly", T0, T0 + 1) is True
    assert await store.schedule_list() == [ScheduleState("nightly", T0, None)]
    # The same slot again (a racing scheduler), or an earlier one (a lagging one): no change.
    assert await second_store.schedule_advance("nightly", T0, T0 + 2) is False
    assert await second_store.schedule_advance("nightly", T0 - 60_000, T0 + 3) is False
    assert await store.schedule_list() == [ScheduleState("nightly", T0, None)]
    assert await second_store.schedule_advance("nightly", T0 + 60_000, T0 + 4) is True
    assert await store.schedule_list() == [ScheduleState("nightly", T0 + 60_000, None)]


async def test_a_pause_is_recorded_once_and_a_resume_clears_it(
    store: Store, reader: ReadStore
) -> None:
    # A schedule that never ran can be paused: its row has no last slot yet.
    assert await store.schedule_pause("nightly", T0) is True
    assert await store.schedule_pause("nightly", T0 + 5) is False
    assert await reader.schedule_list() == [ScheduleState("nightly", None, T0)]
    # Advancing keeps the pause; the pause keeps the last slot.
    assert await store.schedule_advance("nightly", T0 + 10, T0 + 10) is True
    assert await store.schedule_list() == [ScheduleState("nightly", T0 + 10, T0)]
    assert await store.schedule_resume("nightly", T0 + 20) is True
    assert await store.schedule_resume("nightly", T0 + 21) is False
    assert await store.schedule_list() == [ScheduleState("nightly", T0 + 10, None)]
    assert await store.schedule_pause("nightly", T0 + 30) is True
    assert await store.schedule_list() == [ScheduleState("nightly", T0 + 10, T0 + 30)]


async def test_resuming_a_schedule_never_paused_changes_nothing(store: Store) -> None:
    assert await store.schedule_resume("never", T0) is False
    assert await store.schedule_list() == []
    await store.schedule_advance("ran", T0, T0)
    assert await store.schedule_resume("ran", T0) is False


async def test_schedules_are_kept_separately_and_listed_by_name(store: Store) -> None:
    await store.schedule_advance("reports", T0, T0)
    await store.schedule_advance("emails", T0 + 1, T0)
    await store.schedule_pause("billing", T0 + 2)
    assert await store.schedule_list() == [
        ScheduleState("billing", None, T0 + 2),
        ScheduleState("emails", T0 + 1, None),
        ScheduleState("reports", T0, None),
    ]
