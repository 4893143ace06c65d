"""PostgreSQL URLs naming several servers, in libpq's spelling (``h1:p1,h2:p2`` in the
authority) and SQLAlchemy's (``host=`` query parameters): both reach the engine and the
connections opened outside its pool as the same libpq host and port lists, and a writing
queue asks for the server that accepts writes."""

from __future__ import annotations

import pytest

from caravel.errors import ValidationError
from caravel.store.postgresql.connections import create_engine, driver_dsn
from caravel.store.urls import address, backend_of, hosts_of

AUTHORITY = "postgresql://app:s3cret@10.0.0.1:5432,10.0.0.2:5433/jobs"
QUERY = "postgresql+psycopg://app:s3cret@/jobs?host=10.0.0.1:5432&host=10.0.0.2:5433"
LISTS = "postgresql://app:s3cret@/jobs?host=10.0.0.1,10.0.0.2&port=5432,5433"


@pytest.mark.parametrize("url", [AUTHORITY, QUERY, LISTS])
def test_every_spelling_names_the_same_servers_in_order(url: str) -> None:
    assert backend_of(url) == "postgresql"
    assert hosts_of(url) == ("10.0.0.1:5432", "10.0.0.2:5433")
    where = address(url)
    assert (where.host, where.port, where.database) == ("10.0.0.1,10.0.0.2", None, "jobs")
    assert "s3cret" not in where.shown
    assert "10.0.0.1:5432,10.0.0.2:5433/jobs" in where.shown


@pytest.mark.parametrize("url", [AUTHORITY, QUERY, LISTS])
def test_a_writing_engine_asks_libpq_for_the_server_that_accepts_writes(url: str) -> None:
    dsn = driver_dsn(create_engine(url))
    words = dict(word.split("=", 1) for word in dsn.split())
    assert words["host"] == "10.0.0.1,10.0.0.2"
    assert words["port"] == "5432,5433"
    assert words["dbname"] == "jobs"
    assert words["password"] == "s3cret"
    assert words["target_session_attrs"] == "read-write"


def test_a_session_attribute_the_url_gives_is_kept() -> None:
    dsn = driver_dsn(create_engine(f"{AUTHORITY}?target_session_attrs=primary"))
    assert "target_session_attrs=primary" in dsn.split()
    assert "target_session_attrs" not in driver_dsn(create_engine(AUTHORITY, read_only=True))


def test_one_server_is_left_as_it_was() -> None:
    url = "postgresql://app@db.internal:6543/jobs?sslmode=require"
    assert hosts_of(url) == ("db.internal:6543",)
    dsn = driver_dsn(create_engine(url))
    assert "target_session_attrs" not in dsn
    assert {"host=db.internal", "port=6543", "sslmode=require"} <= set(dsn.split())
    assert hosts_of("postgresql://app@h1,h2/jobs") == ("h1", "h2")  # libpq's, without ports


def test_ipv6_servers_and_other_databases() -> None:
    assert hosts_of("postgresql://u@[::1]:5432,h2/db") == ("[::1]:5432", "h2")
    # Only PostgreSQL takes a host list; anything else keeps SQLAlchemy's own parsing.
    assert hosts_of("mariadb://u@h1/db") == ("h1",)
    with pytest.raises(ValidationError, match="'h1:x' in the host list has a port"):
        backend_of("postgresql://u@h1:x,h2:5432/db")
