"""Health probes: liveness without the database, readiness read-only and bounded, and neither
creating anything. SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pymysql
import pytest
import sqlalchemy as sa
from caravel_samples.backend import health, schema
from caravel_samples.backend.settings import Settings
from sqlalchemy.engine import make_url

from caravel import migrate
from tests.samples.backend.support import make_settings, running
from tests.support import until
from tests.support.databases import (
    create_mariadb_database,
    create_pg_database,
    dbapi_connection,
    drop_mariadb_database,
    drop_pg_database,
)


@pytest.fixture
def empty_database(backend: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A database that exists but holds nothing (a new PostgreSQL or MariaDB database; for
    SQLite a path whose file does not exist yet)."""
    if backend == "sqlite":
        yield "sqlite", str(tmp_path / "empty.db")
        return
    if backend == "mariadb":
        maria = create_mariadb_database("caravel_backend_health")
        try:
            yield "mariadb", maria
        finally:
            drop_mariadb_database(maria)
        return
    url = create_pg_database("caravel_backend_health")
    try:
        yield "postgres", url
    finally:
        drop_pg_database(url)


def _tables(settings: Settings) -> set[str]:
    url = make_url(settings.database_url)
    if settings.database_provider == "sqlite":
        with sqlite3.connect(f"file:{url.database}?mode=ro", uri=True) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {r[0] for r in rows}
    if settings.database_provider == "mariadb":
        conn = dbapi_connection(settings.database_url)
        try:
            with conn.cursor() as cursor:
                cursor.execute("SHOW TABLES")
                return {r[0] for r in cursor.fetchall()}
        finally:
            conn.close()
    dsn = url.render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    return {r[0] for r in rows}


async def _probe(settings: Settings) -> tuple[int, int, str, str]:
    async with running(settings) as run:
        live = await run.client.get("/health/live")
        ready = await run.client.get("/health/ready")
    return live.status_code, ready.status_code, live.text, ready.text


async def test_a_migrated_database_is_ready(settings: Settings) -> None:
    assert await _probe(settings) == (200, 200, "Healthy", "Healthy")


async def test_a_missing_sqlite_file_is_unhealthy_and_not_created(tmp_path: Path) -> None:
    path = tmp_path / "nothing-here.db"
    assert await _probe(make_settings("sqlite", str(path))) == (200, 503, "Healthy", "Unhealthy")
    assert _contents_of(tmp_path) == []


async def test_an_unreachable_postgres_database_is_unhealthy(pg_url: str) -> None:
    gone = make_url(pg_url).set(database="caravel_backend_missing_db")
    settings = make_settings("postgres", gone.render_as_string(hide_password=False))
    assert await _probe(settings) == (200, 503, "Healthy", "Unhealthy")


@pytest.mark.mariadb
async def test_an_unreachable_mariadb_database_is_unhealthy(mariadb_url: str) -> None:
    gone = make_url(mariadb_url).set(database="caravel_backend_missing_db")
    settings = make_settings("mariadb", gone.render_as_string(hide_password=False))
    assert await _probe(settings) == (200, 503, "Healthy", "Unhealthy")


async def test_an_empty_database_is_unhealthy_and_stays_empty(
    empty_database: tuple[str, str],
) -> None:
    settings = make_settings(*empty_database)
    if settings.database_provider == "sqlite":
        sqlite3.connect(make_url(settings.database_url).database or "").close()  # an empty file
    assert await _probe(settings) == (200, 503, "Healthy", "Unhealthy")
    assert _tables(settings) == set()
    async with running(settings) as run:  # the app does not create its schema either
        response = await run.client.post(
            "/auth/login", json={"email": "a@example.com", "password": "x"}
        )
        assert response.status_code == 503
    assert _tables(settings) == set()


async def test_a_partial_schema_is_unhealthy(empty_database: tuple[str, str]) -> None:
    settings = make_settings(*empty_database)
    schema.upgrade_app(settings, "0001")  # notes only, no results table, no queue
    assert await _probe(settings) == (200, 503, "Healthy", "Unhealthy")
    migrate.upgrade(settings.database_url)  # the queue, but still no results table
    assert await _probe(settings) == (200, 503, "Healthy", "Unhealthy")
    schema.upgrade_app(settings, "head")
    assert await _probe(settings) == (200, 200, "Healthy", "Healthy")


_DRIVERS = {
    "sqlite": "sqlite+pysqlite",
    "postgres": "postgresql+psycopg",
    "mariadb": "mariadb+pymysql",
}


def _alter(settings: Settings, statement: str) -> None:
    driver = _DRIVERS[settings.database_provider]
    engine = sa.create_engine(make_url(settings.database_url).set(drivername=driver))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(statement))
    finally:
        engine.dispose()


async def test_a_missing_column_is_unhealthy(settings: Settings) -> None:
    _alter(settings, "ALTER TABLE notes RENAME COLUMN text TO body")
    try:
        assert await _probe(settings) == (200, 503, "Healthy", "Unhealthy")
    finally:  # the PostgreSQL database is shared by the session's tests
        _alter(settings, "ALTER TABLE notes RENAME COLUMN body TO text")
    assert await _probe(settings) == (200, 200, "Healthy", "Healthy")


class Blocker:
    """Another connection that keeps the probe's reads waiting: an exclusive lock on a
    rollback-journal SQLite file, or an exclusive table lock on PostgreSQL and MariaDB."""

    def __init__(self, settings: Settings) -> None:
        url = make_url(settings.database_url)
        self.sqlite: sqlite3.Connection | None = None
        self.pg: psycopg.Connection[tuple[object, ...]] | None = None
        self.maria: pymysql.Connection[pymysql.cursors.Cursor] | None = None
        if settings.database_provider == "sqlite":
            self.sqlite = sqlite3.connect(url.database or "", isolation_level=None, timeout=1)
            self.sqlite.execute("PRAGMA journal_mode = DELETE")
            self.sqlite.execute("BEGIN EXCLUSIVE")
        elif settings.database_provider == "mariadb":
            self.maria = dbapi_connection(settings.database_url)
            with self.maria.cursor() as cursor:
                # A WRITE lock keeps every other session out of the table, reads included.
                cursor.execute("LOCK TABLES counter_results WRITE")
        else:
            self.pg = psycopg.connect(url.render_as_string(hide_password=False))
            self.pg.execute("LOCK TABLE counter_results IN ACCESS EXCLUSIVE MODE")

    def release(self) -> None:
        if self.sqlite is not None:
            self.sqlite.rollback()
            self.sqlite.close()
            self.sqlite = None
        if self.pg is not None:
            self.pg.rollback()
            self.pg.close()
            self.pg = None
        if self.maria is not None:
            with self.maria.cursor() as cursor:
                cursor.execute("UNLOCK TABLES")
            self.maria.close()
            self.maria = None


async def test_readiness_gives_up_after_its_timeout(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health, "READY_TIMEOUT_SECONDS", 0.5)
    blocker = Blocker(settings)
    try:
        async with running(settings) as run:
            started = time.monotonic()
            ready = await run.client.get("/health/ready")
            elapsed = time.monotonic() - started
            assert (ready.status_code, ready.text) == (503, "Unhealthy")
            assert elapsed < 3
            blocker.release()
            await until(
                lambda: not health._abandoned,
                what="the abandoned check to unwind once the lock is gone",
                interval=0.05,
            )
    finally:
        blocker.release()
    async with running(settings) as run:
        assert (await run.client.get("/health/ready")).status_code == 200


def _contents_of(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir()]


def _contents(path: Path) -> bytes:
    return path.read_bytes()


async def test_the_probes_read_without_writing(settings: Settings) -> None:
    async with running(settings) as run:
        for _ in range(3):
            assert (await run.client.get("/health/ready")).status_code == 200
    if settings.database_provider != "sqlite":
        return
    path = Path(make_url(settings.database_url).database or "")
    before = _contents(path)
    async with running(settings) as run:
        assert (await run.client.get("/health/ready")).status_code == 200
    assert _contents(path) == before
