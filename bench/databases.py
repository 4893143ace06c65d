"""Fresh, migrated databases for each measurement: a throwaway PostgreSQL database or a SQLite
file in a temporary folder."""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from caravel import migrate as migrations

ADMIN_URL = os.environ.get("CARAVEL_BENCH_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def database(backend: str, *, migrate: bool = True) -> Iterator[str]:
    """A migrated, empty queue database (``migrate=False``: an empty database); dropped or
    deleted afterwards."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="caravel-bench-") as folder:
            url = f"sqlite:///{Path(folder) / 'queue.db'}"
            if migrate:
                migrations.upgrade(url)
            yield url
        return
    name = f"caravel_bench_{secrets.token_hex(4)}"
    with psycopg.connect(_dsn(ADMIN_URL), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        if migrate:
            migrations.upgrade(url)
        yield url
    finally:
        with psycopg.connect(_dsn(ADMIN_URL), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_setting(name: str) -> str:
    with psycopg.connect(_dsn(ADMIN_URL), autocommit=True) as conn:
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    return str(row[0]) if row else "?"


def postgres_dsn(url: str) -> str:
    return _dsn(url)
