"""Revision 0007: ``priority`` with its range check, ``pending_key``, the claim's expression index
over ready rows and the unique index of pending keys come and go with upgrade and downgrade.
SQLite's reflection cannot read an expression index, so its definition is read from the
catalogue of each database instead."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from caravel import migrate
from caravel.migrations.sqlite_counts import TRIGGERS
from tests.migrations.conftest import skip_before_mariadb
from tests.migrations.test_queue_migrations import _rows
from tests.support.databases import execute_sql

RANKED = "ix_caravel_jobs_ranked"
PENDING = "uq_caravel_jobs_pending"


def _definitions(url: str) -> dict[str, str]:
    if url.startswith("postgresql"):
        query = "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'caravel_jobs'"
    else:
        query = "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
    return {str(name): " ".join(str(sql).lower().split()) for name, sql in _rows(url, query)}


def _insert(url: str, job_id: str, *, priority: int) -> None:
    execute_sql(
        url,
        "INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, payload, state, attempt,"
        " max_attempts, due_at, available_at, lease_token, created_at, updated_at, priority)"
        f" VALUES ('{job_id}', 'q', 't.v1', 'default', '{{}}', 'ready', 0, 3, 1, 1, 0, 1, 1,"
        f" {priority})",
    )


def test_upgrade_adds_the_columns_and_indexes_and_downgrade_removes_them(empty_url: str) -> None:
    skip_before_mariadb(empty_url, "0007")
    migrate.upgrade(empty_url, "0006")
    assert RANKED not in _definitions(empty_url)
    migrate.upgrade(empty_url)
    found = _definitions(empty_url)
    assert any(
        f in found[RANKED] for f in ("due_at - (priority * 6000)", "due_at - priority * 6000")
    )
    assert "state" in found[RANKED]
    assert "ready" in found[RANKED]
    assert found[PENDING].startswith("create unique index")
    assert "pending_key is not null" in found[PENDING]
    assert migrate.check(empty_url).differences == ()

    _insert(empty_url, "00000000-0000-0000-0000-000000000001", priority=100)
    _insert(empty_url, "00000000-0000-0000-0000-000000000002", priority=-100)
    with pytest.raises(sa.exc.IntegrityError):
        _insert(empty_url, "00000000-0000-0000-0000-000000000003", priority=101)

    migrate.downgrade(empty_url, "0006")
    assert RANKED not in _definitions(empty_url)
    assert PENDING not in _definitions(empty_url)
    assert migrate.current(empty_url) == "0006"
    # The jobs survive the downgrade, and the finished-count triggers came back with the copy.
    assert _rows(empty_url, "SELECT count(*) FROM caravel_jobs") == [(2,)]
    if not empty_url.startswith("postgresql"):
        triggers = _rows(empty_url, "SELECT name FROM sqlite_master WHERE type = 'trigger'")
        assert {name for (name,) in triggers} == set(TRIGGERS)
    migrate.upgrade(empty_url)
    assert RANKED in _definitions(empty_url)
    assert migrate.check(empty_url).differences == ()
