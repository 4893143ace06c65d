"""Priorities through the public calls on every database: enqueue, enqueue_many (every insert
strategy), the caller's session, the sync facade, status, the order a worker claims in, and the
outbox, which refuses them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Session

from caravel import DispatchOptions, JobContext, JobRegistry, Leases, SyncQueue, ValidationError
from caravel.errors import RegistrationError
from caravel.outbox import Outbox, add_outbox
from caravel.store.urls import sync_url
from tests.support import Add, dispatch, inspector_of, make_registry, open_queue


@pytest.mark.parametrize("count", [1, 3, 40], ids=["one", "values", "copy"])
async def test_enqueued_priorities_are_on_the_status_and_set_the_claim_order(
    db_url: str, count: int
) -> None:
    async with open_queue(db_url) as queue:
        plain = await queue.enqueue(Add(0), dispatch())
        results = await queue.enqueue_many(
            [(Add(n), dispatch(priority=n - count - 1)) for n in range(1, count + 1)]
        )
        urgent = await queue.enqueue(Add(99), dispatch(priority=100))
        for n, result in enumerate(results, start=1):
            status = await queue.get_status(result.job_id, "default", "tenant-a")
            assert status is not None
            assert status.priority == n - count - 1
        listed = {s.job_id: s.priority for s in await inspector_of(queue).list_jobs(limit=100)}
        assert listed[urgent.job_id] == 100
        assert listed[plain.job_id] == 0

        claimed = await Leases(queue).claim_many("default", count + 2)
        # Enqueued within the same moment of the test's clock: priority alone orders them.
        expected = [urgent, plain, *reversed(results)]
        assert [job.job_id for job in claimed] == [r.job_id for r in expected]
        assert [job.priority for job in claimed] == [100, 0, *range(-1, -count - 1, -1)]


async def test_an_idempotent_repeat_with_another_priority_is_the_original_job(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        first = await queue.enqueue(Add(1), dispatch("order-1", priority=10))
        again = await queue.enqueue(Add(1), dispatch("order-1", priority=-10))
        assert (again.job_id, again.already_enqueued) == (first.job_id, True)
        status = await queue.get_status(first.job_id, "default", "tenant-a")
        assert status is not None
        assert status.priority == 10


@pytest.fixture
def sync_queue(db_url: str) -> Iterator[SyncQueue]:
    with SyncQueue(db_url, make_registry()) as queue:
        yield queue


def test_the_sync_facade_and_the_callers_session_store_priorities(
    db_url: str, sync_queue: SyncQueue
) -> None:
    direct = sync_queue.enqueue(Add(1), dispatch(priority=-3))
    engine = sa.create_engine(sync_url(db_url))
    try:
        with Session(engine) as session:
            joined = sync_queue.enqueue_many(
                [(Add(n), dispatch(priority=n + 1)) for n in range(3)], session=session
            )
            one = sync_queue.enqueue(Add(9), dispatch(priority=42), session=session)
            session.commit()
    finally:
        engine.dispose()
    found = sync_queue.get_status(direct.job_id, "default", "tenant-a")
    assert found is not None
    assert found.priority == -3
    for n, result in enumerate([*joined, one]):
        status = sync_queue.get_status(result.job_id, "default", "tenant-a")
        assert status is not None
        assert status.priority == (42 if result is one else n + 1)


def _noop(job: object, ctx: JobContext[None]) -> None:
    return None


def _typed_registry() -> JobRegistry:
    """``Add`` (tests.add.v1) with a priority of 30 for its type."""
    registry = JobRegistry()
    registry.register("tests.add.v1", Add, _noop, priority=30)
    return registry


async def test_a_job_type_default_priority_applies_unless_the_dispatch_gives_one(
    db_url: str,
) -> None:
    async with open_queue(db_url, _typed_registry()) as queue:
        typed = await queue.enqueue(Add(1), dispatch())
        given = await queue.enqueue(Add(2), dispatch(priority=-5))
        zero = await queue.enqueue(Add(3), dispatch(priority=0))
        many = await queue.enqueue_many([(Add(n), dispatch()) for n in range(10, 30)])
        found = {s.job_id: s.priority for s in await inspector_of(queue).list_jobs(limit=100)}
    assert (found[typed.job_id], found[given.job_id], found[zero.job_id]) == (30, -5, 0)
    assert {found[r.job_id] for r in many} == {30}


@pytest.mark.parametrize("priority", [101, -101, True, 1.5, "1"])
def test_a_job_type_priority_out_of_range_is_refused(priority: object) -> None:
    with pytest.raises(RegistrationError) as caught:
        JobRegistry().register("tests.add.v1", Add, _noop, priority=priority)  # type: ignore[arg-type]
    assert caught.value.field == "priority"
    assert caught.value.rule == "must be an integer from -100 to 100"


class _AppBase(DeclarativeBase):
    pass


_Envelope = add_outbox(_AppBase.metadata)


def test_the_outbox_refuses_a_priority_and_stages_nothing() -> None:
    engine = sa.create_engine("sqlite://")
    _AppBase.metadata.create_all(engine)
    outbox = Outbox(make_registry(), _Envelope)
    try:
        with Session(engine) as session:
            with pytest.raises(ValidationError) as caught:
                outbox.stage(session, Add(1), DispatchOptions(queue="default", priority=5))
            assert caught.value.field == "priority"
            assert "outbox" in caught.value.rule
            session.commit()
            assert session.scalar(sa.select(sa.func.count()).select_from(_Envelope)) == 0
            # With the default priority, the same job stages.
            outbox.stage(session, Add(1), DispatchOptions(queue="default", priority=0))
            session.commit()
            assert session.scalar(sa.select(sa.func.count()).select_from(_Envelope)) == 1
            # A priority the job type gives is refused too, unless the dispatch says 0.
            typed = Outbox(_typed_registry(), _Envelope)
            with pytest.raises(ValidationError) as caught:
                typed.stage(session, Add(2), DispatchOptions(queue="default"))
            assert caught.value.field == "priority"
            typed.stage(session, Add(2), DispatchOptions(queue="default", priority=0))
            session.commit()
            assert session.scalar(sa.select(sa.func.count()).select_from(_Envelope)) == 2
    finally:
        engine.dispose()
