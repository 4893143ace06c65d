"""Revision 0018: the jobs' ``lease_nonce`` column comes and goes with upgrade and downgrade, a
job stored before it is claimed and acknowledged under a nonce after it, and a MariaDB upgrade
that stopped half way finishes when run again."""

from __future__ import annotations

import sqlalchemy as sa

from caravel import migrate
from caravel.store import open_store
from tests.migrations.conftest import is_mariadb
from tests.migrations.test_queue_migrations import _old_row, _rows
from tests.store.conformance.builders import claim_one
from tests.support.databases import execute_sql, sync_engine

COLUMN = "lease_nonce"


def _columns(url: str) -> set[str]:
    engine = sync_engine(url)
    try:
        return {str(c["name"]) for c in sa.inspect(engine).get_columns("caravel_jobs")}
    finally:
        engine.dispose()


async def test_upgrade_adds_the_column_and_downgrade_drops_it(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0017")
    assert COLUMN not in _columns(empty_url)
    job_id = _old_row(empty_url, 1, None)
    migrate.upgrade(empty_url)
    assert COLUMN in _columns(empty_url)
    assert _rows(empty_url, f"SELECT {COLUMN} FROM caravel_jobs") == [(None,)]
    assert migrate.check(empty_url).differences == ()

    opened = open_store(empty_url)
    try:
        claimed = await claim_one(opened.inner, 1_000)
        assert claimed.job_id == job_id
        assert claimed.lease.nonce != 0
        assert await opened.inner.job_complete_many([claimed.lease], 1_001) == {job_id}
    finally:
        await opened.close()
    (nonce,) = _rows(empty_url, f"SELECT {COLUMN} FROM caravel_jobs")[0]
    assert nonce == claimed.lease.nonce

    migrate.downgrade(empty_url, "0017")
    assert COLUMN not in _columns(empty_url)
    assert migrate.current(empty_url) == "0017"
    assert len(_rows(empty_url, "SELECT id FROM caravel_jobs")) == 1
    if is_mariadb(empty_url):
        # MariaDB commits DDL as it goes: an upgrade stopped after adding the column is rerun.
        execute_sql(empty_url, f"ALTER TABLE caravel_jobs ADD COLUMN {COLUMN} BIGINT NULL")
    migrate.upgrade(empty_url)
    assert COLUMN in _columns(empty_url)
    assert migrate.check(empty_url).differences == ()
