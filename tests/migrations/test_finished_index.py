"""Revision 0005: the partial index over finished jobs (and PostgreSQL's extended statistics on
queue and state) comes and goes with upgrade and downgrade, and an index an operator built
beforehand (``CREATE INDEX CONCURRENTLY``, docs/guides/migrations.md) is kept."""

from __future__ import annotations

import sqlalchemy as sa

from caravel import migrate
from tests.migrations.conftest import skip_before_mariadb
from tests.migrations.test_queue_migrations import _rows
from tests.support.databases import execute_sql, sync_engine

INDEX = "ix_caravel_jobs_finished"
STATISTICS = "caravel_jobs_queue_state"


def _indexes(url: str) -> set[str]:
    engine = sync_engine(url)
    try:
        return {str(i["name"]) for i in sa.inspect(engine).get_indexes("caravel_jobs")}
    finally:
        engine.dispose()


def _statistics(url: str) -> list[tuple[object, ...]]:
    if not url.startswith("postgresql"):
        return []
    return _rows(url, f"SELECT stxname FROM pg_statistic_ext WHERE stxname = '{STATISTICS}'")


def test_upgrade_adds_the_index_and_downgrade_removes_it(empty_url: str) -> None:
    skip_before_mariadb(empty_url, "0005")
    migrate.upgrade(empty_url, "0004")
    assert INDEX not in _indexes(empty_url)
    migrate.upgrade(empty_url)
    assert INDEX in _indexes(empty_url)
    postgres = empty_url.startswith("postgresql")
    assert _statistics(empty_url) == ([(STATISTICS,)] if postgres else [])
    assert migrate.check(empty_url).differences == ()

    migrate.downgrade(empty_url, "0004")
    assert INDEX not in _indexes(empty_url)
    assert _statistics(empty_url) == []
    assert migrate.current(empty_url) == "0004"
    migrate.upgrade(empty_url)
    assert INDEX in _indexes(empty_url)


def test_an_index_built_beforehand_is_kept(empty_url: str) -> None:
    skip_before_mariadb(empty_url, "0005")
    migrate.upgrade(empty_url, "0004")
    execute_sql(
        empty_url,
        f"CREATE INDEX {INDEX} ON caravel_jobs (queue, state) WHERE available_at IS NULL",
    )
    migrate.upgrade(empty_url)
    assert INDEX in _indexes(empty_url)
    assert migrate.check(empty_url).differences == ()
