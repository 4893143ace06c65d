"""The application's own Alembic history beside the queue's: upgrading a notes-only schema,
rolling back the still-empty results table and upgrading again, without losing accounts or
notes. SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from caravel_samples.backend import schema
from caravel_samples.backend.settings import Settings

from caravel import migrate
from tests.samples.backend.support import add_user, count_rows, drain, make_settings, running
from tests.support.databases import (
    create_mariadb_database,
    create_pg_database,
    drop_mariadb_database,
    drop_pg_database,
)


@pytest.fixture
def fresh(backend: str, tmp_path: Path) -> Iterator[Settings]:
    """Settings for a database nothing was ever applied to."""
    if backend == "sqlite":
        yield make_settings("sqlite", str(tmp_path / "fresh.db"))
        return
    if backend == "mariadb":
        maria = create_mariadb_database("caravel_backend_migrations")
        try:
            yield make_settings("mariadb", maria)
        finally:
            drop_mariadb_database(maria)
        return
    url = create_pg_database("caravel_backend_migrations")
    try:
        yield make_settings("postgres", url)
    finally:
        drop_pg_database(url)


async def _notes(settings: Settings, email: str) -> list[str]:
    async with running(settings) as run, run.browser() as browser:
        await browser.sign_in(email)
        items = (await browser.client.get("/notes")).json()["items"]
    return [n["text"] for n in items]


async def test_upgrade_rollback_and_upgrade_again_keep_accounts_and_notes(
    fresh: Settings,
) -> None:
    # A deployment from before the counter: the queue and revision 0001 only.
    migrate.upgrade(fresh.database_url)
    schema.upgrade_app(fresh, "0001")
    assert schema.current_app(fresh) == "0001"
    await add_user(fresh, "alice@example.com")
    async with running(fresh) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        for text in ("one", "two"):
            created = await alice.client.post(
                "/notes", json={"text": text}, headers=alice.headers()
            )
            assert created.status_code == 201
        assert (await run.client.get("/health/ready")).status_code == 503  # no results table

    schema.upgrade_app(fresh, "head")
    assert schema.current_app(fresh) == schema.head() == "0002"
    assert schema.check_all(fresh) == []
    assert await _notes(fresh, "alice@example.com") == ["two", "one"]
    assert await count_rows(fresh, "counter_results") == 0

    schema.downgrade_app(fresh, "0001")  # the results table is still empty: allowed
    assert schema.current_app(fresh) == "0001"
    assert await _notes(fresh, "alice@example.com") == ["two", "one"]
    with pytest.raises(Exception, match="counter_results"):
        await count_rows(fresh, "counter_results")

    schema.upgrade_app(fresh, "head")
    assert schema.check_all(fresh) == []
    assert await count_rows(fresh, "users") == 1
    async with running(fresh) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        assert (await alice.submit("k-1", 8)).status_code == 202
        assert await drain(run.worker()) == 1
        assert (await alice.summary())["total"] == 8
        assert [n["text"] for n in (await alice.client.get("/notes")).json()["items"]] == [
            "two",
            "one",
        ]
        assert (await run.client.get("/health/ready")).status_code == 200


async def test_rolling_back_refuses_to_drop_recorded_results(fresh: Settings) -> None:
    schema.migrate_all(fresh)
    await add_user(fresh, "alice@example.com")
    async with running(fresh) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        await alice.submit("k-1", 8)
        await drain(run.worker())
    with pytest.raises(RuntimeError, match="refusing to drop"):
        schema.downgrade_app(fresh, "0001")
    assert schema.current_app(fresh) == "0002"
    assert await count_rows(fresh, "counter_results") == 1


async def test_the_histories_are_independent(fresh: Settings) -> None:
    schema.migrate_all(fresh)
    assert schema.check_all(fresh) == []
    # Rolling the application back to nothing leaves the queue at its head, and vice versa.
    schema.downgrade_app(fresh, "base")
    assert schema.current_app(fresh) is None
    assert migrate.current(fresh.database_url) == migrate.head()
    schema.upgrade_app(fresh, "head")
    problems = schema.check_all(fresh)
    assert problems == []


def test_check_reports_an_unmigrated_database(fresh: Settings) -> None:
    problems = schema.check_all(fresh)
    assert any(p.startswith("queue:") for p in problems)
    assert any(p.startswith("backend:") for p in problems)
