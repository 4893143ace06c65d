"""Queue counts never read the finished history: with many finished rows retained, the counts
statement reads live rows through the claim index and finished ones through the partial index over
finished rows, a bounded stretch of it, and never the jobs table itself from end to end.

The plan is read from the database (PostgreSQL's ``EXPLAIN``, SQLite's ``EXPLAIN QUERY PLAN``)
after loading the rows with one bulk statement, so the test holds the plan honest without timing
anything. Past the exact limit, PostgreSQL estimates from its statistics and SQLite counts the
partial index; both are checked against the rows really there.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.dialects import postgresql, sqlite

from caravel.store import open_reader, queries
from caravel.store.sqlite.store import SqliteStore
from tests.support.databases import SqliteTemplate, pg_database

FINISHED = 30_000  # completed rows of the queue "busy"; 3x the exact limit
DEAD = 40  # dead letters of "busy"
LIVE = 500  # ready jobs of "busy"
NOW = 10_000

# One bulk statement per database: ``n`` rows of one queue in one state, finished (no
# ``available_at``) unless ready.
_PG_ROWS = """
INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, payload, state, attempt,
    max_attempts, due_at, available_at, lease_token, finished_at, created_at, updated_at)
SELECT gen_random_uuid(), %(queue)s, 't.v1', 'tenant', repeat('x', 200), %(state)s::varchar,
    1, 3, g,
    CASE WHEN %(state)s::varchar = 'ready' THEN g END, 1,
    CASE WHEN %(state)s::varchar = 'ready' THEN NULL ELSE g END, g, g
FROM generate_series(1, %(n)s) AS g
"""
_SQLITE_ROWS = """
WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < :n)
INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, payload, state, attempt,
    max_attempts, due_at, available_at, lease_token, finished_at, created_at, updated_at)
SELECT lower(hex(randomblob(16))), :queue, 't.v1', 'tenant', printf('%.200c', 'x'), :state,
    1, 3, x, CASE WHEN :state = 'ready' THEN x END, 1,
    CASE WHEN :state = 'ready' THEN NULL ELSE x END, x, x
FROM g
"""
_LOAD = (
    ("busy", "completed", FINISHED),
    ("busy", "dead_letter", DEAD),
    ("busy", "ready", LIVE),
    ("history", "completed", 200),
)


@pytest.fixture(params=("sqlite", "postgresql"))
def loaded(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A queue database of its own holding :data:`_LOAD`, analysed."""
    if request.param == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        url = template.copy_to(tmp_path / "queue.db")
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            for queue, state, n in _LOAD:
                conn.execute(_SQLITE_ROWS, {"queue": queue, "state": state, "n": n})
            conn.execute("ANALYZE")
        yield request.param, url
        return
    with pg_database(migrated=True) as url:
        with psycopg.connect(_dsn(url), autocommit=True) as conn:
            for queue, state, n in _LOAD:
                conn.execute(_PG_ROWS, {"queue": queue, "state": state, "n": n})
            conn.execute("VACUUM ANALYZE caravel_jobs")
        yield request.param, url


def _dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def _sql(backend: str, queue: str | None) -> str:
    dialect = postgresql.dialect() if backend == "postgresql" else sqlite.dialect()
    # The statement the store runs, with the values it would bind written in.
    kept = SqliteStore._kept_counts if backend == "sqlite" else None
    statement = queries.counts(queue is not None, kept).params(b_now=NOW, b_queue=queue)
    return str(statement.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))


def _pg_scans(url: str, text: str) -> list[tuple[str, str | None, str | None]]:
    with psycopg.connect(_dsn(url), autocommit=True) as conn:
        row = conn.execute("EXPLAIN (FORMAT JSON) " + text).fetchone()  # type: ignore[arg-type]
    assert row is not None

    def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield plan
        for child in plan.get("Plans", []):
            yield from nodes(child)

    return [
        (n["Node Type"], n.get("Relation Name"), n.get("Index Name"))
        for n in nodes(row[0][0]["Plan"])
        if ("Scan" in n["Node Type"] and n.get("Relation Name") == "caravel_jobs")
        or n.get("Index Name") is not None
    ]


def _sqlite_plan(url: str, text: str) -> list[str]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return [str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + text)]


@pytest.mark.parametrize("queue", [None, "busy"])
def test_the_counts_statement_reads_no_finished_row_beyond_its_index(
    loaded: tuple[str, str], queue: str | None
) -> None:
    backend, url = loaded
    text = _sql(backend, queue)
    if backend == "postgresql":
        scans = _pg_scans(url, text)
        assert scans, "no scan of the jobs table in the plan"
        assert all(kind != "Seq Scan" for kind, _, _ in scans), scans
        assert all(kind != "Bitmap Heap Scan" or index is None for kind, _, index in scans)
        used = {index for _, _, index in scans}
        assert "ix_caravel_jobs_finished" in used, scans
        assert used <= {"ix_caravel_jobs_finished", "ix_caravel_jobs_claim"}, scans
        return
    plan = _sqlite_plan(url, text)
    reads = [line for line in plan if "caravel_jobs" in line]
    assert reads, plan
    # "SCAN caravel_jobs" alone would be the table from end to end.
    assert all("USING" in line and "INDEX" in line for line in reads), plan
    assert any("ix_caravel_jobs_finished" in line for line in reads), plan
    assert all(
        "ix_caravel_jobs_finished" in line or "ix_caravel_jobs_claim" in line for line in reads
    ), plan
    # Finished jobs are counted from the triggers' table, one row per queue and state, not from
    # a stretch of the finished index.
    kept = [line for line in plan if "caravel_finished_counts" in line]
    assert kept, plan
    assert all(line.startswith("SEARCH") for line in kept), plan


async def test_counts_are_exact_up_to_the_limit_and_close_past_it(
    loaded: tuple[str, str],
) -> None:
    backend, url = loaded
    reader = open_reader(url)
    try:
        counts = {c.queue: c for c in await reader.queue_counts(None, NOW)}
        one = await reader.queue_counts("busy", NOW)
    finally:
        await reader.close()
    assert sorted(counts) == ["busy", "history"]
    busy = counts["busy"]
    assert (busy.ready, busy.delayed, busy.running, busy.expired) == (LIVE, 0, 0, 0)
    assert busy.oldest_ready_due_ms == 1
    assert busy.dead_letter == DEAD  # under the limit: exact
    assert counts["history"].completed == 200
    assert counts["history"].ready == 0
    assert one == [busy]
    assert queries.FINISHED_EXACT_LIMIT < FINISHED
    if backend == "sqlite":
        assert busy.completed == FINISHED  # read from the triggers' exact counts
    else:
        # The planner's estimate from ANALYZE's sample: never below the limit, and close.
        assert busy.completed > queries.FINISHED_EXACT_LIMIT
        assert abs(busy.completed - FINISHED) <= FINISHED // 10


async def test_statistics_older_than_the_rows_are_not_believed() -> None:
    # The table filled up since it was last analysed (never, here): the planner's estimate is
    # below what the bounded count already saw, so the store counts instead.
    rows = queries.FINISHED_EXACT_LIMIT + 2_000
    with pg_database(migrated=True) as url:
        with psycopg.connect(_dsn(url), autocommit=True) as conn:
            conn.execute("ALTER TABLE caravel_jobs SET (autovacuum_enabled = false)")
            conn.execute(_PG_ROWS, {"queue": "busy", "state": "completed", "n": rows})
        reader = open_reader(url)
        try:
            (busy,) = await reader.queue_counts("busy", NOW)
        finally:
            await reader.close()
    assert busy.completed == rows


def _finished_by_queue_and_state(conn: sqlite3.Connection, sql: str) -> dict[tuple[str, str], int]:
    return {(queue, state): n for queue, state, n in conn.execute(sql) if n}


def test_sqlite_keeps_its_finished_counts_in_step_with_every_change(
    sqlite_template: SqliteTemplate, tmp_path: Path
) -> None:
    url = sqlite_template.copy_to(tmp_path / "queue.db")
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        for queue, state, n in (("busy", "completed", 12_000), ("busy", "ready", 5)):
            conn.execute(_SQLITE_ROWS, {"queue": queue, "state": state, "n": n})
        conn.execute(_SQLITE_ROWS, {"queue": "other", "state": "dead_letter", "n": 3})
        pick = "rowid IN (SELECT rowid FROM caravel_jobs WHERE queue = ? AND state = ? LIMIT ?)"
        # Two jobs finish, a dead letter is replayed, a finished job is updated in place and
        # a hundred finished ones are deleted by hand.
        conn.execute(
            f"UPDATE caravel_jobs SET state = 'completed', available_at = NULL WHERE {pick}",
            ("busy", "ready", 2),
        )
        conn.execute(
            f"UPDATE caravel_jobs SET state = 'ready', available_at = 1 WHERE {pick}",
            ("other", "dead_letter", 1),
        )
        conn.execute(
            f"UPDATE caravel_jobs SET available_at = NULL, updated_at = 7 WHERE {pick}",
            ("busy", "completed", 1),
        )
        conn.execute(f"DELETE FROM caravel_jobs WHERE {pick}", ("busy", "completed", 100))
        kept = _finished_by_queue_and_state(
            conn, "SELECT queue, state, jobs FROM caravel_finished_counts"
        )
        there = _finished_by_queue_and_state(
            conn,
            "SELECT queue, state, count(*) FROM caravel_jobs WHERE available_at IS NULL"
            " GROUP BY queue, state",
        )
    assert kept == there == {("busy", "completed"): 11_902, ("other", "dead_letter"): 2}


@pytest.mark.parametrize("loaded", ["sqlite"], indirect=True)  # PostgreSQL estimates instead
async def test_sqlite_finished_counts_come_from_the_kept_counts(
    loaded: tuple[str, str],
) -> None:
    _, url = loaded
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        # Told apart from a count of the index: the kept count is read, one row.
        conn.execute("UPDATE caravel_finished_counts SET jobs = jobs + 7 WHERE queue = 'busy'")
    reader = open_reader(url)
    try:
        (busy,) = await reader.queue_counts("busy", NOW)
    finally:
        await reader.close()
    assert busy.completed == FINISHED + 7
    assert busy.dead_letter == DEAD + 7  # under the limit too: nothing reads the index
