"""The queue's migrations on every database: upgrade, check, downgrade, and what an application
sees when it forgot to run them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import produce_migrations
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import make_url

from caravel import DatabaseQueue, SchemaNotReadyError, migrate
from caravel.store.schema import include_object, metadata
from tests.databases import create_pg_database, drop_pg_database, sqlite_url
from tests.support import Add, dispatch, make_registry, open_queue

JOBS = "caravel_jobs"
VERSION = "caravel_alembic_version"
UPGRADE_HINT = "caravel db upgrade"

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


@pytest.fixture(params=BACKENDS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with nothing in it: a brand new, empty SQLite file, or a new PostgreSQL
    database."""
    if request.param == "sqlite":
        path = tmp_path / "empty.db"
        path.touch()
        yield sqlite_url(path)
        return
    url = create_pg_database("caravel_migrations")
    try:
        yield url
    finally:
        drop_pg_database(url)


def _engine(url: str) -> sa.Engine:
    parsed = make_url(url)
    driver = (
        "postgresql+psycopg" if parsed.get_backend_name() == "postgresql" else "sqlite+pysqlite"
    )
    return sa.create_engine(parsed.set(drivername=driver), poolclass=sa.pool.NullPool)


def _tables(url: str) -> set[str]:
    engine = _engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _execute(url: str, *statements: str) -> None:
    engine = _engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    engine = _engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.exec_driver_sql(query)]
    finally:
        engine.dispose()


def _autogenerate_is_empty(url: str) -> bool:
    """Run Alembic autogenerate ourselves (not through ``migrate.check``)."""
    engine = _engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn,
                opts={
                    "version_table": VERSION,
                    "compare_type": True,
                    "include_object": include_object,
                    "target_metadata": metadata,
                },
            )
            script = produce_migrations(context, metadata)
            assert script.upgrade_ops is not None
            return script.upgrade_ops.is_empty()
    finally:
        engine.dispose()


# ----- upgrade and check -------------------------------------------------------------------


def test_upgrade_from_empty_creates_the_tables_and_own_version_table(empty_url: str) -> None:
    assert not (_tables(empty_url) & {JOBS, VERSION})
    assert migrate.current(empty_url) is None

    migrate.upgrade(empty_url)

    tables = _tables(empty_url)
    assert {JOBS, VERSION} <= tables
    assert "alembic_version" not in tables  # the application's name stays free
    assert _rows(empty_url, f"SELECT version_num FROM {VERSION}") == [(migrate.head(),)]
    assert migrate.current(empty_url) == migrate.head()

    engine = _engine(empty_url)
    try:
        inspector = sa.inspect(engine)
        columns = {column["name"] for column in inspector.get_columns(JOBS)}
        assert columns == set(metadata.tables[JOBS].columns.keys())
        assert "ix_caravel_jobs_claim" in {index["name"] for index in inspector.get_indexes(JOBS)}
        assert inspector.get_pk_constraint(JOBS)["constrained_columns"] == ["id"]
        unique = {
            tuple(constraint["column_names"])
            for constraint in inspector.get_unique_constraints(JOBS)
        }
        assert ("queue", "tenant_id", "idempotency_key") in unique
    finally:
        engine.dispose()


def test_upgrade_twice_is_a_no_op(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    migrate.upgrade(empty_url)
    assert _rows(empty_url, f"SELECT version_num FROM {VERSION}") == [(migrate.head(),)]


def test_check_passes_after_upgrade_with_no_differences(empty_url: str) -> None:
    migrate.upgrade(empty_url)

    report = migrate.check(empty_url)

    assert report.current == migrate.head()
    assert report.head == migrate.head()
    assert report.differences == ()
    assert _autogenerate_is_empty(empty_url)


def test_check_on_an_empty_database_says_to_run_upgrade(empty_url: str) -> None:
    with pytest.raises(SchemaNotReadyError) as caught:
        migrate.check(empty_url)
    assert UPGRADE_HINT in str(caught.value)
    assert not (_tables(empty_url) & {JOBS, VERSION})  # check never creates anything


def test_check_finds_a_table_that_drifted_from_the_model(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    _execute(empty_url, "DROP INDEX ix_caravel_jobs_claim")
    assert not _autogenerate_is_empty(empty_url)

    with pytest.raises(SchemaNotReadyError) as caught:
        migrate.check(empty_url)
    assert "ix_caravel_jobs_claim" in str(caught.value)
    assert UPGRADE_HINT in str(caught.value)


def test_check_rejects_a_revision_other_than_head(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    _execute(empty_url, f"UPDATE {VERSION} SET version_num = 'ffff'")

    with pytest.raises(SchemaNotReadyError) as caught:
        migrate.check(empty_url)
    assert "ffff" in str(caught.value)


# ----- downgrade ---------------------------------------------------------------------------


async def test_downgrade_to_base_removes_the_jobs_and_upgrade_works_again(
    empty_url: str,
) -> None:
    migrate.upgrade(empty_url)
    async with open_queue(empty_url) as queue:
        await queue.enqueue(Add(1), dispatch("before"))

    migrate.downgrade(empty_url, "base")

    assert JOBS not in _tables(empty_url)
    assert migrate.current(empty_url) is None
    with pytest.raises(SchemaNotReadyError):
        migrate.check(empty_url)

    migrate.upgrade(empty_url)

    assert JOBS in _tables(empty_url)
    assert migrate.check(empty_url).current == migrate.head()
    assert _rows(empty_url, f"SELECT COUNT(*) FROM {JOBS}") == [(0,)]  # the old job is gone
    async with open_queue(empty_url) as queue:
        result = await queue.enqueue(Add(1), dispatch("before"))
        assert result.already_enqueued is False


# ----- the application's own tables --------------------------------------------------------

APP_SETUP = (
    "CREATE TABLE app_orders (id INTEGER PRIMARY KEY, note VARCHAR(50) NOT NULL)",
    "CREATE INDEX ix_app_orders_note ON app_orders (note)",
    "INSERT INTO app_orders (id, note) VALUES (1, 'keep me')",
    # The application's own Alembic history, in Alembic's default version table.
    "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)",
    "INSERT INTO alembic_version (version_num) VALUES ('app_rev_42')",
)


def _assert_app_untouched(url: str) -> None:
    assert {"app_orders", "alembic_version"} <= _tables(url)
    assert _rows(url, "SELECT id, note FROM app_orders") == [(1, "keep me")]
    assert _rows(url, "SELECT version_num FROM alembic_version") == [("app_rev_42",)]
    engine = _engine(url)
    try:
        indexes = {index["name"] for index in sa.inspect(engine).get_indexes("app_orders")}
    finally:
        engine.dispose()
    assert "ix_app_orders_note" in indexes


def test_application_tables_are_ignored_and_untouched(empty_url: str) -> None:
    _execute(empty_url, *APP_SETUP)
    assert migrate.current(empty_url) is None  # the application's history is not ours

    migrate.upgrade(empty_url)
    _assert_app_untouched(empty_url)
    report = migrate.check(empty_url)
    assert report.differences == ()
    assert _autogenerate_is_empty(empty_url)

    migrate.downgrade(empty_url, "base")
    _assert_app_untouched(empty_url)
    assert JOBS not in _tables(empty_url)

    migrate.upgrade(empty_url)
    _assert_app_untouched(empty_url)
    assert migrate.check(empty_url).current == migrate.head()


# ----- a queue against a database nobody migrated ------------------------------------------


async def test_enqueue_on_an_unmigrated_database_says_to_run_upgrade(empty_url: str) -> None:
    async with open_queue(empty_url) as queue:
        with pytest.raises(SchemaNotReadyError) as caught:
            await queue.enqueue(Add(1), dispatch("k"))
    assert UPGRADE_HINT in str(caught.value)
    assert JOBS not in _tables(empty_url)  # the library never creates its tables itself


async def test_claim_on_an_unmigrated_database_says_to_run_upgrade(empty_url: str) -> None:
    async with open_queue(empty_url) as queue:
        with pytest.raises(SchemaNotReadyError) as caught:
            await queue.claim("default")
    assert UPGRADE_HINT in str(caught.value)


async def test_get_status_on_an_unmigrated_database_says_to_run_upgrade(empty_url: str) -> None:
    job_id = "01890000-0000-7000-8000-000000000000"
    async with open_queue(empty_url) as queue:
        with pytest.raises(SchemaNotReadyError) as caught:
            await queue.get_status(job_id, "default", "tenant-a")
    assert UPGRADE_HINT in str(caught.value)


async def test_check_schema_on_an_empty_database(empty_url: str) -> None:
    queue = DatabaseQueue(empty_url, make_registry())
    try:
        with pytest.raises(SchemaNotReadyError) as caught:
            await queue.check_schema()
        assert UPGRADE_HINT in str(caught.value)
    finally:
        await queue.close()


async def test_check_schema_follows_the_applied_revision(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    queue = DatabaseQueue(empty_url, make_registry())
    try:
        await queue.check_schema()

        _execute(empty_url, f"UPDATE {VERSION} SET version_num = 'ffff'")
        with pytest.raises(SchemaNotReadyError) as caught:
            await queue.check_schema()
        assert "ffff" in str(caught.value)

        _execute(empty_url, f"UPDATE {VERSION} SET version_num = '{migrate.head()}'")
        await queue.check_schema()

        migrate.downgrade(empty_url, "base")
        with pytest.raises(SchemaNotReadyError) as caught:
            await queue.check_schema()
        assert UPGRADE_HINT in str(caught.value)
    finally:
        await queue.close()
