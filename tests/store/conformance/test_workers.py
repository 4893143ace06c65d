"""The worker registry: ``worker_register``, ``worker_heartbeat`` (alive, or stopped) and
``worker_list`` of the workers heard from since a moment, newest first."""

from __future__ import annotations

import dataclasses

from caravel.store.protocol import Heartbeat, Store
from tests.store.conformance.builders import T0, worker


async def test_registered_workers_are_listed_newest_first(store: Store) -> None:
    first = worker(T0, ("default",))
    second = worker(T0 + 10, ("a", "b.c", "d-e"), concurrency=16, in_flight=2)
    third = worker(T0 + 20, ())
    for each in (first, second, third):
        await store.worker_register(each)

    assert await store.worker_list(T0) == [third, second, first]
    # ``since`` is inclusive: a worker last heard from at that very moment is listed.
    assert await store.worker_list(T0 + 10) == [third, second]
    assert await store.worker_list(T0 + 21) == []


async def test_a_heartbeat_keeps_a_worker_listed(store: Store) -> None:
    quiet, beating = worker(T0), worker(T0 + 1)
    await store.worker_register(quiet)
    await store.worker_register(beating)

    await store.worker_heartbeat(Heartbeat(beating.id, T0 + 5_000, in_flight=3))

    alive = dataclasses.replace(beating, heartbeat_at=T0 + 5_000, in_flight=3)
    assert await store.worker_list(T0 + 1_000) == [alive]
    assert await store.worker_list(T0) == [alive, quiet]


async def test_a_stopping_worker_says_when_it_stopped(store: Store) -> None:
    leaving, staying = worker(T0, in_flight=2), worker(T0 + 1)
    await store.worker_register(leaving)
    await store.worker_register(staying)

    await store.worker_heartbeat(Heartbeat(leaving.id, T0 + 7_000, in_flight=0, stopped=True))

    assert await store.worker_list(T0) == [
        staying,
        dataclasses.replace(leaving, heartbeat_at=T0 + 7_000, in_flight=0, stopped_at=T0 + 7_000),
    ]
