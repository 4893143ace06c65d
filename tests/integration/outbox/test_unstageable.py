"""What the outbox cannot carry: its table is the application's and has no column for tags, a
priority, a pending key or a per-dispatch timeout, so staging a dispatch with one is refused,
naming the field, and stages nothing; the same job without it stages."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Session

from caravel import DispatchOptions, JobRegistry, Outbox, ValidationError, add_outbox
from tests.support import Add, make_registry


class _AppBase(DeclarativeBase):
    pass


_Envelope = add_outbox(_AppBase.metadata)


async def _noop(job: Add, ctx: Any) -> None:
    return None


def _staged(session: Session) -> int:
    return session.scalar(sa.select(sa.func.count()).select_from(_Envelope)) or 0


@pytest.fixture
def session() -> Iterator[Session]:
    engine = sa.create_engine("sqlite://")
    _AppBase.metadata.create_all(engine)
    try:
        with Session(engine) as session:
            yield session
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("field", "given", "without"),
    [
        ("tags", {"tags": ("a",)}, {}),
        ("priority", {"priority": 5}, {"priority": 0}),
        ("pending_key", {"pending_key": "k"}, {}),
        ("timeout", {"timeout": timedelta(seconds=5)}, {}),
    ],
)
def test_the_outbox_refuses_what_its_table_cannot_hold_and_stages_nothing(
    session: Session, field: str, given: dict[str, Any], without: dict[str, Any]
) -> None:
    outbox = Outbox(make_registry(), _Envelope)
    with pytest.raises(ValidationError) as caught:
        outbox.stage(session, Add(1), DispatchOptions(queue="default", **given))
    assert caught.value.field == field
    assert "outbox" in caught.value.rule
    session.commit()
    assert _staged(session) == 0
    outbox.stage(session, Add(1), DispatchOptions(queue="default", **without))
    session.commit()
    assert _staged(session) == 1


def test_a_priority_the_job_type_gives_is_refused_unless_the_dispatch_says_0(
    session: Session,
) -> None:
    registry = JobRegistry()
    registry.register("tests.add.v1", Add, _noop, priority=30)
    outbox = Outbox(registry, _Envelope)
    with pytest.raises(ValidationError) as caught:
        outbox.stage(session, Add(2), DispatchOptions(queue="default"))
    assert caught.value.field == "priority"
    outbox.stage(session, Add(2), DispatchOptions(queue="default", priority=0))
    session.commit()
    assert _staged(session) == 1
