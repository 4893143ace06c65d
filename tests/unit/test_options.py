"""``QueueOptions``: defaults, every range edge, and the retry backoff."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from caravel import OptionsError, QueueOptions, ValidationError, WorkerOptions

TICK = timedelta(microseconds=1)
MS = timedelta(milliseconds=1)
SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)
DAYS_7 = timedelta(days=7)


def test_defaults() -> None:
    options = QueueOptions()
    assert options.max_attempts == 3
    assert options.max_payload_bytes == 65_536
    assert options.lease_duration == timedelta(minutes=5)
    assert options.retry_delay == timedelta(seconds=5)
    assert options.max_retry_delay == timedelta(minutes=5)
    assert options.lease_renewal_interval is None
    assert options.max_lease_lifetime == timedelta(hours=1)


def test_options_are_frozen_and_keyword_only() -> None:
    options = QueueOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_attempts = 1000  # type: ignore[misc]
    with pytest.raises(TypeError):
        QueueOptions(5)  # type: ignore[misc]


def test_options_error_is_a_validation_error() -> None:
    assert issubclass(OptionsError, ValidationError)


# ----- accepted at each edge ---------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        {"max_attempts": 1},
        {"max_attempts": 100},
        {"max_payload_bytes": 1},
        {"max_payload_bytes": 1024 * 1024},
        {"lease_duration": SECOND, "max_lease_lifetime": SECOND},
        {"lease_duration": HOUR},
        {"retry_delay": TICK},
        {"retry_delay": timedelta(minutes=5)},  # equal to the default max_retry_delay
        {"retry_delay": timedelta(seconds=10), "max_retry_delay": timedelta(seconds=10)},
        {"max_retry_delay": timedelta(seconds=5)},  # equal to the default retry_delay
        {"lease_renewal_interval": timedelta(milliseconds=100)},
        {"lease_renewal_interval": timedelta(minutes=2, seconds=30)},  # half of 5 minutes
        {"lease_duration": SECOND, "lease_renewal_interval": timedelta(milliseconds=500)},
        {"lease_duration": SECOND, "lease_renewal_interval": timedelta(milliseconds=100)},
        {"max_lease_lifetime": timedelta(minutes=5)},  # equal to the default lease
        {"max_lease_lifetime": DAYS_7},
        {"lease_duration": HOUR, "max_lease_lifetime": HOUR},
    ],
    ids=repr,
)
def test_values_at_the_edge_are_accepted(settings: dict[str, object]) -> None:
    options = QueueOptions(**settings)  # type: ignore[arg-type]
    for name, value in settings.items():
        assert getattr(options, name) == value


# ----- rejected just past each edge --------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 101}, "max_attempts"),
        ({"max_attempts": -5}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"max_attempts": 3.0}, "max_attempts"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"max_payload_bytes": 0}, "max_payload_bytes"),
        ({"max_payload_bytes": 1024 * 1024 + 1}, "max_payload_bytes"),
        ({"max_payload_bytes": True}, "max_payload_bytes"),
        ({"max_payload_bytes": 1024.0}, "max_payload_bytes"),
        ({"lease_duration": SECOND - TICK}, "lease_duration"),
        ({"lease_duration": HOUR + TICK}, "lease_duration"),
        ({"lease_duration": timedelta(0)}, "lease_duration"),
        ({"lease_duration": 300}, "lease_duration"),
        ({"retry_delay": timedelta(0)}, "retry_delay"),
        ({"retry_delay": -SECOND}, "retry_delay"),
        ({"retry_delay": 5}, "retry_delay"),
        ({"retry_delay": timedelta(minutes=5) + TICK}, "max_retry_delay"),
        (
            {"retry_delay": timedelta(seconds=10), "max_retry_delay": timedelta(seconds=10) - TICK},
            "max_retry_delay",
        ),
        ({"max_retry_delay": timedelta(seconds=5) - TICK}, "max_retry_delay"),
        ({"max_retry_delay": 300.0}, "max_retry_delay"),
        ({"lease_renewal_interval": timedelta(milliseconds=100) - TICK}, "lease_renewal_interval"),
        ({"lease_renewal_interval": timedelta(0)}, "lease_renewal_interval"),
        (
            {"lease_renewal_interval": timedelta(minutes=2, seconds=30) + TICK},
            "lease_renewal_interval",
        ),
        (
            {
                "lease_duration": SECOND,
                "lease_renewal_interval": timedelta(milliseconds=500) + TICK,
            },
            "lease_renewal_interval",
        ),
        ({"lease_renewal_interval": 1.0}, "lease_renewal_interval"),
        ({"max_lease_lifetime": timedelta(minutes=5) - TICK}, "max_lease_lifetime"),
        ({"lease_duration": HOUR, "max_lease_lifetime": HOUR - MS}, "max_lease_lifetime"),
        ({"max_lease_lifetime": DAYS_7 + TICK}, "max_lease_lifetime"),
        ({"max_lease_lifetime": 3600}, "max_lease_lifetime"),
    ],
    ids=repr,
)
def test_values_just_past_the_edge_raise_options_error_naming_the_field(
    settings: dict[str, object], field: str
) -> None:
    with pytest.raises(OptionsError) as caught:
        QueueOptions(**settings)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


@given(
    lease_ms=st.integers(min_value=1_000, max_value=3_600_000),
    renewal_ms=st.integers(min_value=0, max_value=3_600_000),
)
def test_renewal_interval_rule(lease_ms: int, renewal_ms: int) -> None:
    lease = timedelta(milliseconds=lease_ms)
    renewal = timedelta(milliseconds=renewal_ms)
    allowed = timedelta(milliseconds=100) <= renewal <= lease / 2
    if allowed:
        options = QueueOptions(
            lease_duration=lease, lease_renewal_interval=renewal, max_lease_lifetime=DAYS_7
        )
        assert options.lease_renewal_interval == renewal
    else:
        with pytest.raises(OptionsError) as caught:
            QueueOptions(
                lease_duration=lease, lease_renewal_interval=renewal, max_lease_lifetime=DAYS_7
            )
        assert caught.value.field == "lease_renewal_interval"


@given(
    lease_s=st.integers(min_value=1, max_value=3_600),
    lifetime_s=st.integers(min_value=0, max_value=8 * 86_400),
)
def test_lifetime_rule(lease_s: int, lifetime_s: int) -> None:
    lease = timedelta(seconds=lease_s)
    lifetime = timedelta(seconds=lifetime_s)
    if lease <= lifetime <= DAYS_7:
        assert QueueOptions(lease_duration=lease, max_lease_lifetime=lifetime)
    else:
        with pytest.raises(OptionsError) as caught:
            QueueOptions(lease_duration=lease, max_lease_lifetime=lifetime)
        assert caught.value.field == "max_lease_lifetime"


# ----- retry backoff -----------------------------------------------------------------------


def test_default_backoff_doubles_from_retry_delay_and_caps_at_five_minutes() -> None:
    options = QueueOptions()
    seconds = [options.retry_backoff(attempt).total_seconds() for attempt in range(1, 11)]
    assert seconds == [5, 10, 20, 40, 80, 160, 300, 300, 300, 300]


def test_backoff_before_the_first_attempt_is_the_retry_delay() -> None:
    options = QueueOptions()
    assert options.retry_backoff(0) == timedelta(seconds=5)
    assert options.retry_backoff(-3) == timedelta(seconds=5)


def test_backoff_uses_the_configured_delays() -> None:
    options = QueueOptions(
        retry_delay=timedelta(milliseconds=250), max_retry_delay=timedelta(seconds=3)
    )
    assert [options.retry_backoff(a) for a in range(1, 7)] == [
        timedelta(milliseconds=250),
        timedelta(milliseconds=500),
        timedelta(seconds=1),
        timedelta(seconds=2),
        timedelta(seconds=3),
        timedelta(seconds=3),
    ]


@pytest.mark.parametrize("attempt", [39, 40, 41, 64, 100, 1_000, 10**6, 2**63, 10**100])
def test_huge_attempt_numbers_do_not_overflow(attempt: int) -> None:
    assert QueueOptions().retry_backoff(attempt) == timedelta(minutes=5)


@pytest.mark.parametrize("attempt", range(1, 101))
def test_every_reachable_attempt_has_a_backoff_with_long_delays(attempt: int) -> None:
    # max_attempts allows 100 attempts, so every attempt number up to 100 can fail and need a
    # backoff, whatever (valid) delays the application chose.
    options = QueueOptions(
        max_attempts=100, retry_delay=timedelta(minutes=5), max_retry_delay=timedelta(hours=1)
    )
    expected_seconds = min(300 * 2 ** (attempt - 1), 3600)
    assert options.retry_backoff(attempt) == timedelta(seconds=expected_seconds)


@given(
    retry_us=st.integers(min_value=1, max_value=10**10),
    extra_us=st.integers(min_value=0, max_value=10**16),
    attempt=st.integers(min_value=1, max_value=200),
)
@example(retry_us=300_000_000, extra_us=3_300_000_000, attempt=40)  # 5 min doubling, 1 h cap
@example(retry_us=1, extra_us=10**15, attempt=41)  # cap far above 2**40 microseconds
def test_backoff_is_the_doubling_formula_capped(retry_us: int, extra_us: int, attempt: int) -> None:
    retry = timedelta(microseconds=retry_us)
    cap = timedelta(microseconds=retry_us + extra_us)
    options = QueueOptions(retry_delay=retry, max_retry_delay=cap)
    expected_us = min(retry_us * 2 ** (attempt - 1), retry_us + extra_us)
    assert options.retry_backoff(attempt) == timedelta(microseconds=expected_us)


@given(
    retry_us=st.integers(min_value=1, max_value=10**10),
    extra_us=st.integers(min_value=0, max_value=10**16),
    attempt=st.integers(min_value=1, max_value=150),
)
@example(retry_us=1, extra_us=10**15, attempt=40)
def test_backoff_never_shrinks_as_attempts_grow(retry_us: int, extra_us: int, attempt: int) -> None:
    options = QueueOptions(
        retry_delay=timedelta(microseconds=retry_us),
        max_retry_delay=timedelta(microseconds=retry_us + extra_us),
    )
    assert options.retry_backoff(attempt) <= options.retry_backoff(attempt + 1)
    assert options.retry_backoff(attempt) <= options.max_retry_delay


def test_acknowledgements_are_asynchronous_unless_a_worker_asks_for_durable_ones() -> None:
    from caravel import WorkerOptions

    assert WorkerOptions().durable_acks is False
    assert WorkerOptions(durable_acks=True).durable_acks is True
    with pytest.raises(OptionsError) as caught:
        WorkerOptions(durable_acks="yes")  # type: ignore[arg-type]
    assert caught.value.field == "durable_acks"


def test_the_progress_interval_is_from_100_milliseconds_to_1_hour() -> None:
    from caravel import WorkerOptions

    assert WorkerOptions().progress_interval == SECOND
    for edge in (100 * MS, HOUR):
        assert WorkerOptions(progress_interval=edge).progress_interval == edge
    for wrong in (100 * MS - TICK, HOUR + TICK, timedelta(0), 1.0):
        with pytest.raises(OptionsError) as caught:
            WorkerOptions(progress_interval=wrong)  # type: ignore[arg-type]
        assert caught.value.field == "progress_interval"


@pytest.mark.parametrize(
    "given",
    [
        {"emails": 0.001},
        {"emails": 61},
        {"emails": float("nan")},
        {"emails": "1"},
        {"emails": True},
        {"": 1.0},
        [("emails", 1.0)],
    ],
)
def test_bad_poll_intervals_name_the_field(given: object) -> None:
    with pytest.raises(OptionsError) as raised:
        WorkerOptions(poll_intervals=given)  # type: ignore[arg-type]
    assert raised.value.field == "poll_intervals"


def test_polling_only_must_be_a_bool() -> None:
    with pytest.raises(OptionsError) as raised:
        WorkerOptions(polling_only="yes")  # type: ignore[arg-type]
    assert raised.value.field == "polling_only"
