"""The outage window's arithmetic (:mod:`caravel.worker.outage`) on a :class:`ManualClock`, which
database errors each dialect counts as an outage (real driver exceptions, translated as the
stores translate them), and the option that sets the window."""

from __future__ import annotations

import logging
from datetime import timedelta

import asyncmy.errors
import psycopg
import psycopg.errors
import pytest
import sqlalchemy as sa

from caravel import OptionsError, StoreError, WorkerOptions
from caravel.store.errors import ErrorTranslation
from caravel.store.mariadb.outages import is_outage as mariadb_outage
from caravel.store.postgresql.outages import is_outage as postgresql_outage
from caravel.testing import ManualClock
from caravel.worker.outage import LONGEST_PAUSE, Outage, is_outage

DOWN = StoreError("job_claim_many", "connection refused", outage=True)
WRONG = StoreError("job_claim_many", None)


def test_pauses_double_from_a_tenth_of_a_second_to_two_within_their_jitter() -> None:
    clock = ManualClock()
    lowest = Outage(clock, 60, draw=lambda: 0.0)
    highest = Outage(clock, 60, draw=lambda: 0.999999)
    low = [lowest.pause(DOWN, n) for n in range(8)]
    high = [round(highest.pause(DOWN, n), 3) for n in range(8)]
    assert low == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])
    assert high == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]
    assert highest.pause(DOWN, 10_000) <= LONGEST_PAUSE  # no overflow, still capped


async def test_the_last_pause_ends_with_the_window_and_a_failure_after_it_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="caravel.worker")
    clock = ManualClock()
    outage = Outage(clock, 3, draw=lambda: 0.999999)
    assert outage.pause(DOWN, 0) == pytest.approx(0.1)
    assert outage.since_ms == clock.now_ms()
    await clock.advance(timedelta(seconds=2.5))
    assert outage.pause(DOWN, 5) == pytest.approx(0.5)  # not 2 s: the window ends sooner
    await clock.advance(timedelta(seconds=0.5))
    with pytest.raises(StoreError) as raised:
        outage.pause(DOWN, 6)
    assert raised.value is DOWN
    assert [r.levelname for r in caplog.records] == ["WARNING", "ERROR"]
    assert caplog.messages[0] == (
        "database unavailable (StoreError during job_claim_many); retrying for up to 3s"
    )
    assert caplog.messages[1].startswith("database unavailable for 3s (StoreError during ")
    assert "exit code 1" in caplog.messages[1]
    assert "restart it" in caplog.messages[1]


async def test_a_success_ends_the_outage_and_the_next_one_has_a_whole_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="caravel.worker")
    clock = ManualClock()
    outage = Outage(clock, 3)
    outage.pause(DOWN, 0)
    await clock.advance(timedelta(seconds=2))
    outage.ended()
    assert (outage.since_ms, outage.survived) == (None, 1)
    assert caplog.messages[-1] == "database reachable again after 2.0s; the worker carries on"
    await clock.advance(timedelta(seconds=2))
    assert outage.pause(DOWN, 0) > 0  # 4 s after the first failure, but a new outage
    outage.ended()
    outage.ended()  # nothing to end: no second line
    assert outage.survived == 2


def test_an_error_that_is_not_an_outage_raises_at_once() -> None:
    outage = Outage(ManualClock(), 30)
    with pytest.raises(StoreError) as raised:
        outage.pause(WRONG, 0)
    assert raised.value is WRONG
    assert outage.since_ms is None
    bug = ValueError("a bug")
    with pytest.raises(ValueError, match="a bug") as bugged:
        outage.pause(bug, 0)
    assert bugged.value is bug


def test_a_window_of_zero_stops_at_the_first_failure_saying_nothing_more(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="caravel.worker")
    with pytest.raises(StoreError):
        Outage(ManualClock(), 0).pause(DOWN, 0)
    assert caplog.records == []


# ----- which errors are outages ---------------------------------------------------------------


def wrapped(orig: Exception) -> sa.exc.DBAPIError:
    """``orig`` as SQLAlchemy raises a driver's error."""
    return sa.exc.OperationalError("SELECT 1", {}, orig)


@pytest.mark.parametrize(
    ("orig", "outage"),
    [
        (psycopg.OperationalError("connection failed: Connection refused"), True),
        (psycopg.OperationalError("server closed the connection unexpectedly"), True),
        (psycopg.InterfaceError("the connection is closed"), True),
        (psycopg.errors.AdminShutdown("terminating connection"), True),
        (psycopg.errors.CrashShutdown("crash"), True),
        (psycopg.errors.CannotConnectNow("the database system is starting up"), True),
        (psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE"), True),
        (psycopg.errors.ConnectionFailure("connection failure"), True),
        (psycopg.errors.SerializationFailure("could not serialize"), False),
        (psycopg.errors.DeadlockDetected("deadlock detected"), False),
        (psycopg.errors.QueryCanceled("statement timeout"), False),
        (psycopg.errors.UniqueViolation("duplicate key"), False),
        (psycopg.errors.UndefinedTable("no such table"), False),
        (psycopg.errors.SyntaxError("syntax error"), False),
        (ConnectionRefusedError(111, "Connection refused"), True),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_postgresql_outages(orig: Exception, outage: bool) -> None:
    assert postgresql_outage(wrapped(orig)) is outage
    assert postgresql_outage(orig) is outage


@pytest.mark.parametrize(
    ("number", "outage"),
    [
        (2002, True),
        (2003, True),
        (2006, True),
        (2013, True),
        (2055, True),
        (1053, True),
        (1927, True),
        (1290, True),
        (1836, True),
        (1213, False),  # deadlock: the store retries it
        (1205, False),  # lock wait timeout
        (1062, False),  # duplicate key
        (1146, False),  # no such table
        (1317, False),  # a query killed on its own
        (1064, False),  # syntax
    ],
)
def test_mariadb_outages(number: int, outage: bool) -> None:
    orig = asyncmy.errors.OperationalError(number, "text")
    assert mariadb_outage(wrapped(orig)) is outage
    assert mariadb_outage(orig) is outage


def test_the_translation_marks_the_store_error_as_the_dialect_says() -> None:
    for orig, dialect, expected in [
        (psycopg.errors.AdminShutdown("terminating"), postgresql_outage, True),
        (psycopg.errors.UniqueViolation("duplicate"), postgresql_outage, False),
        (asyncmy.errors.OperationalError(2013, "Lost connection"), mariadb_outage, True),
    ]:
        with pytest.raises(StoreError) as raised, ErrorTranslation("job_complete", outage=dialect):
            raise wrapped(orig)
        assert raised.value.outage is expected
        assert is_outage(raised.value) is expected
    # A dialect that names no outages (SQLite: "database is locked" is contention, not an
    # unreachable server) leaves every error one that stops the worker.
    with pytest.raises(StoreError) as raised, ErrorTranslation("job_complete"):
        raise sa.exc.OperationalError("BEGIN", {}, Exception("database is locked"))
    assert raised.value.outage is False


# ----- the option --------------------------------------------------------------------------


def test_the_window_is_thirty_seconds_by_default_and_checked_once() -> None:
    assert WorkerOptions().outage_window == timedelta(seconds=30)
    assert WorkerOptions(outage_window=timedelta(0)).outage_window == timedelta(0)
    assert WorkerOptions(outage_window=timedelta(hours=1)).outage_window == timedelta(hours=1)
    for bad in (timedelta(seconds=-1), timedelta(hours=1, seconds=1)):
        with pytest.raises(OptionsError) as raised:
            WorkerOptions(outage_window=bad)
        assert raised.value.field == "outage_window"
        assert "must be from 0 to 1 hour" in str(raised.value)
    with pytest.raises(OptionsError, match=r"outage_window: must be a datetime\.timedelta"):
        WorkerOptions(outage_window=30)  # type: ignore[arg-type]
