"""Watching the durability each write transaction commits with, as the database sees it.

The database itself reports the setting: a trigger on the jobs table, created in this test's own
database, records PostgreSQL's ``current_setting('synchronous_commit')`` or SQLite's
``pragma_synchronous`` from inside the acknowledgement's own transaction, as the server sees it
when the row changes. Nothing is mocked: the store runs its real statements on its real
connections, and the trigger observes them (``tests/store/test_ack_durability.py``,
``tests/integration/worker/test_ack_durability.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import SqliteTemplate, execute_sql, pg_database, sync_engine

__all__ = ["SETTINGS", "seen", "watched_url"]

#: What each database calls "waits for the disk" and "does not".
SETTINGS = {
    "postgresql": {True: "on", False: "off"},
    "sqlite": {True: "2", False: "1"},  # FULL, NORMAL
}

_PG_TRIGGER = (
    "CREATE TABLE seen_sync (setting text)",
    """CREATE FUNCTION record_sync() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO seen_sync VALUES (current_setting('synchronous_commit'));
        RETURN NULL;
    END $$""",
    "CREATE TRIGGER record_sync AFTER UPDATE ON caravel_jobs "
    "FOR EACH STATEMENT EXECUTE FUNCTION record_sync()",
)
_SQLITE_TRIGGER = (
    "CREATE TABLE seen_sync (setting text)",
    "CREATE TRIGGER record_sync AFTER UPDATE ON caravel_jobs BEGIN "
    "INSERT INTO seen_sync SELECT synchronous FROM pragma_synchronous; END",
)


@pytest.fixture(params=("sqlite", "postgresql"))
def watched_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A migrated queue of its own (the trigger must not outlive the test), with the trigger."""
    if request.param == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        url = template.copy_to(tmp_path / "queue.db")
        execute_sql(url, *_SQLITE_TRIGGER)
        yield request.param, url
        return
    with pg_database(migrated=True) as url:
        execute_sql(url, *_PG_TRIGGER)
        yield request.param, url


def seen(url: str) -> list[str]:
    """The settings recorded so far, and forget them."""
    engine = sync_engine(url)
    try:
        with engine.begin() as conn:
            rows = [str(row[0]) for row in conn.exec_driver_sql("SELECT setting FROM seen_sync")]
            conn.exec_driver_sql("DELETE FROM seen_sync")
    finally:
        engine.dispose()
    return rows
