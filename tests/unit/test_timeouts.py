"""Execution timeouts as configuration: ``DispatchOptions(timeout=...)``, ``register(timeout=...)``
and ``WorkerOptions(timeout_grace=...)`` take a ``timedelta`` in range, refuse anything else with
a typed error naming the field, and a job's own timeout is stored to the millisecond, rounded
up."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from caravel import (
    DispatchOptions,
    JobContext,
    JobRegistry,
    OptionsError,
    QueueOptions,
    RegistrationError,
    ValidationError,
    WorkerOptions,
)
from caravel.preparation import prepare_job
from tests.support import Add

BAD_TIMEOUTS = [
    timedelta(0),
    timedelta(seconds=-1),
    timedelta(microseconds=999),
    timedelta(days=7, microseconds=1),
    5,
    5.0,
    "10s",
]


async def _noop(job: Add, ctx: JobContext[Any]) -> None:
    return None


@pytest.mark.parametrize("bad", BAD_TIMEOUTS)
def test_a_dispatch_refuses_a_timeout_out_of_range(bad: object) -> None:
    with pytest.raises(ValidationError) as caught:
        DispatchOptions(queue="default", timeout=bad)  # type: ignore[arg-type]
    assert caught.value.field == "timeout"


@pytest.mark.parametrize("bad", BAD_TIMEOUTS)
def test_a_registration_refuses_a_timeout_out_of_range_and_registers_nothing(bad: object) -> None:
    registry = JobRegistry()
    with pytest.raises(RegistrationError) as caught:
        registry.register("tests.add.v1", Add, _noop, timeout=bad)  # type: ignore[arg-type]
    assert caught.value.field == "timeout"
    assert "tests.add.v1" not in registry
    with pytest.raises(RegistrationError) as decorated:
        registry.handles("tests.add.v1", Add, timeout=bad)(_noop)  # type: ignore[arg-type]
    assert decorated.value.field == "timeout"
    assert len(registry) == 0


@pytest.mark.parametrize("good", [timedelta(milliseconds=1), timedelta(days=7)])
def test_the_bounds_themselves_are_accepted(good: timedelta) -> None:
    assert DispatchOptions(queue="default", timeout=good).timeout == good
    registry = JobRegistry()
    registry.register("tests.add.v1", Add, _noop, timeout=good)
    assert registry.for_job(Add(1)).timeout == good


@pytest.mark.parametrize(
    "bad", [timedelta(0), timedelta(milliseconds=999), timedelta(hours=1, seconds=1), 30]
)
def test_the_worker_refuses_a_grace_out_of_range(bad: object) -> None:
    with pytest.raises(OptionsError) as caught:
        WorkerOptions(timeout_grace=bad)  # type: ignore[arg-type]
    assert caught.value.field == "timeout_grace"


def test_the_grace_is_thirty_seconds_by_default() -> None:
    assert WorkerOptions().timeout_grace == timedelta(seconds=30)


def test_a_jobs_own_timeout_is_stored_in_milliseconds_rounded_up() -> None:
    registry = JobRegistry()
    registry.register("tests.add.v1", Add, _noop, timeout=timedelta(minutes=1))
    options = QueueOptions()
    own = DispatchOptions(queue="default", timeout=timedelta(seconds=1, microseconds=1))
    assert prepare_job(registry, options, Add(1), own, 0).timeout_ms == 1_001
    # The type's timeout is not stored: a job without its own takes the type's when it runs.
    plain = DispatchOptions(queue="default")
    assert prepare_job(registry, options, Add(1), plain, 0).timeout_ms is None
