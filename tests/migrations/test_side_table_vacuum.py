"""Revision 0020: on PostgreSQL the tables that churn with every job (attempt records, rate-limit
starts, batch counters) get caravel_jobs' autovacuum settings, and lose them on downgrade; on
SQLite and MariaDB the revision changes nothing. ``caravel db check`` stays clean either way."""

from __future__ import annotations

import sqlalchemy as sa

from caravel import migrate
from tests.migrations.test_queue_migrations import _rows
from tests.support.databases import sync_engine

TABLES = ("caravel_attempts", "caravel_queue_starts", "caravel_batches")
TUNED = [
    "autovacuum_vacuum_scale_factor=0.01",
    "autovacuum_analyze_scale_factor=0.02",
    "autovacuum_vacuum_cost_delay=0",
]


def _options(url: str) -> dict[str, list[str]]:
    found = _rows(
        url,
        "SELECT relname, coalesce(reloptions, '{}') FROM pg_class"
        " WHERE relkind = 'r' AND relname ~ '^caravel_'",
    )
    return {str(name): list(options) for name, options in found}


def _schema(url: str) -> dict[str, list[str]]:
    engine = sync_engine(url)
    try:
        inspector = sa.inspect(engine)
        return {
            table: sorted(str(c["name"]) for c in inspector.get_columns(table))
            for table in inspector.get_table_names()
        }
    finally:
        engine.dispose()


def test_upgrade_tunes_the_churning_tables_and_downgrade_resets_them(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0019")
    before = _schema(empty_url)
    migrate.upgrade(empty_url, "0020")
    assert migrate.current(empty_url) == "0020"
    if empty_url.startswith("postgresql"):
        options = _options(empty_url)
        for table in TABLES:
            assert options[table] == TUNED, table
        assert options["caravel_jobs"] == TUNED  # 0002's, untouched
    else:  # nothing to change: the schema is the same
        assert _schema(empty_url) == before

    migrate.downgrade(empty_url, "0019")
    assert migrate.current(empty_url) == "0019"
    if empty_url.startswith("postgresql"):
        options = _options(empty_url)
        for table in TABLES:
            assert options[table] == [], table
        assert options["caravel_jobs"] == TUNED
    migrate.upgrade(empty_url)
    assert migrate.check(empty_url).differences == ()
