"""The schema is applied deliberately: ``migrate`` brings the queue's and the sample's histories
to their newest revisions and the table matches the model; an unmigrated database is reported,
not created. The settings' one URL is checked once, naming the setting. SQLite, PostgreSQL and
MariaDB for the schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from caravel_samples.flask import schema
from caravel_samples.flask.settings import URL_VARIABLE, Settings

from caravel import OptionsError, migrate
from tests.support.databases import (
    create_mariadb_database,
    create_pg_database,
    drop_mariadb_database,
    drop_pg_database,
)


@pytest.fixture
def fresh(backend: str, tmp_path: Path) -> Iterator[Settings]:
    """A database nothing was ever applied to (for SQLite, not even created)."""
    if backend == "sqlite":
        yield Settings.from_url(f"sqlite:///{tmp_path / 'fresh.db'}")
        return
    if backend == "mariadb":
        maria = create_mariadb_database("caravel_flask_schema")
        try:
            yield Settings.from_url(maria)
        finally:
            drop_mariadb_database(maria)
        return
    url = create_pg_database("caravel_flask_schema")
    try:
        yield Settings.from_url(url)
    finally:
        drop_pg_database(url)


def test_migrate_applies_both_histories_and_the_table_matches_the_model(
    fresh: Settings,
) -> None:
    problems = schema.check_all(fresh)
    assert len(problems) == 1
    assert problems[0].startswith("queue: ")
    migrate.upgrade(fresh.database_url)  # the queue alone: the sample's table is missing
    assert schema.check_all(fresh) == [
        "signups: at revision none, the newest is 0001; "
        "run `python -m caravel_samples.flask migrate`"
    ]
    schema.migrate_all(fresh)
    assert schema.check_all(fresh) == []
    schema.migrate_all(fresh)  # again: nothing to do
    assert schema.check_all(fresh) == []


def test_a_sqlite_file_is_left_in_wal_mode(tmp_path: Path) -> None:
    """What the sample's engine relies on: request threads and the queue's own threads read
    while one of them writes."""
    import sqlite3

    settings = Settings.from_url(f"sqlite:///{tmp_path / 'wal.db'}")
    schema.migrate_all(settings)
    with sqlite3.connect(settings.sqlite_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_a_relative_sqlite_path_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings.from_url("sqlite:///signups.db")
    assert settings.database_url == f"sqlite:///{tmp_path.resolve() / 'signups.db'}"


@pytest.mark.parametrize(
    "url",
    [
        "",
        "not a url",
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite+aiosqlite:///x.db",
        "mysql+mysqldb://root@localhost/app",
        "mariadb+asyncmy://root@localhost/app",
        "postgresql+asyncpg://u@h/db",
    ],
)
def test_a_bad_url_names_the_setting(url: str) -> None:
    with pytest.raises(OptionsError) as caught:
        Settings.from_url(url)
    assert caught.value.field == "--url"
    assert "sqlite:///path/to/file.db, postgresql://user@host/name or mariadb://" in (
        caught.value.rule
    )


def test_the_environment_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(URL_VARIABLE, raising=False)
    with pytest.raises(OptionsError) as caught:
        Settings.from_environment()
    assert caught.value.field == URL_VARIABLE
    assert caught.value.rule.startswith("is required")
    monkeypatch.setenv(URL_VARIABLE, "postgresql+psycopg://app@db/app")
    assert Settings.from_environment().database_url == "postgresql://app@db/app"
    monkeypatch.setenv(URL_VARIABLE, "mysql://app@db/app")
    assert Settings.from_environment().database_url == "mariadb://app@db/app"
