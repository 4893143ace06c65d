"""Caravel's own query options on a PostgreSQL URL: read once, checked with an error naming the
option, and never handed to libpq."""

from __future__ import annotations

import pytest

from caravel.errors import ValidationError
from caravel.store.postgresql.connections import connect_args_for
from caravel.store.urls import PostgresOptions, async_url, postgres_options, sync_url

BASE = "postgresql://u@h/db"


def test_defaults_when_the_url_gives_none() -> None:
    assert postgres_options(BASE) == PostgresOptions()
    assert "options" in connect_args_for(PostgresOptions())


def test_transaction_pooling_turns_wakeups_and_session_state_off() -> None:
    options = postgres_options(f"{BASE}?pool_mode=transaction")
    assert options == PostgresOptions(transaction_pooling=True, wakeups=False)
    args = connect_args_for(options)
    assert args["prepare_threshold"] is None
    assert "options" not in args


def test_wakeups_off_and_the_notify_window() -> None:
    assert postgres_options(f"{BASE}?wakeups=off").wakeups is False
    assert postgres_options(f"{BASE}?notify_window_ms=0").notify_window == 0.0
    assert postgres_options(f"{BASE}?notify_window_ms=20").notify_window == 0.02


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("pool_mode=statement", "pool_mode"),
        ("wakeups=maybe", "wakeups"),
        ("notify_window_ms=-1", "notify_window_ms"),
        ("notify_window_ms=1001", "notify_window_ms"),
        ("notify_window_ms=1.5", "notify_window_ms"),
        ("pool_mode=transaction&wakeups=on", "wakeups"),
        ("wakeups=on&wakeups=off", "wakeups"),
    ],
)
def test_a_bad_value_names_its_option(query: str, field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        postgres_options(f"{BASE}?{query}")
    assert raised.value.field == field


def test_the_options_never_reach_the_driver() -> None:
    url = f"{BASE}?pool_mode=transaction&notify_window_ms=3&sslmode=disable"
    for made in (async_url(url), sync_url(url)):
        assert dict(made.query) == {"sslmode": "disable"}
