"""The job listings and the throughput read never read the finished history end to end.

A listing (the dashboard's jobs and dead-letter pages, ``caravel jobs list``,
``QueueInspector.list_jobs``) reads one page of each queue's stretch of
``ix_caravel_jobs_created`` in its order, newest or oldest first, and sorts nothing but the
merged pages (the queues found by skipping through that index); a dead-letter listing reads a
page of ``ix_caravel_jobs_dead``; the throughput read (the dashboard's charts) reads each
queue's window of ``ix_caravel_jobs_finished``, the queues found by skipping through it. The
plan is read from the database (PostgreSQL's ``EXPLAIN``, SQLite's ``EXPLAIN QUERY PLAN``)
after loading a long finished history with one bulk statement and analysing it, so the test
holds the plans honest without timing anything.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from caravel.jobs import JobState
from caravel.store import queries
from caravel.store.values import JobFilter, ThroughputQuery
from tests.support.databases import SqliteTemplate, pg_database

FINISHED = 30_000  # finished jobs of "busy", one in ten a dead letter, finished long ago
NOW = 1_900_000_000_000
HOUR = 3_600_000

# ``n`` rows of one queue in one state, created a second apart up to ``NOW``; finished rows
# have no ``available_at`` and finished a day before ``NOW``.
_PG_ROWS = """
INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, payload, state, attempt,
    max_attempts, due_at, available_at, lease_token, finished_at, created_at, updated_at)
SELECT gen_random_uuid(), %(queue)s, 't.v1', 'tenant', repeat('x', 200),
    CASE WHEN %(state)s::varchar = 'ready' THEN 'ready'
        WHEN g %% 10 = 0 THEN 'dead_letter' ELSE 'completed' END,
    1, 3, %(now)s - g * 1000,
    CASE WHEN %(state)s::varchar = 'ready' THEN %(now)s - g * 1000 END, 1,
    CASE WHEN %(state)s::varchar = 'ready' THEN NULL ELSE %(now)s - 86400000 - g END,
    %(now)s - g * 1000, %(now)s - g * 1000
FROM generate_series(1, %(n)s) AS g
"""
_SQLITE_ROWS = """
WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < :n)
INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, payload, state, attempt,
    max_attempts, due_at, available_at, lease_token, finished_at, created_at, updated_at)
SELECT lower(hex(randomblob(16))), :queue, 't.v1', 'tenant', printf('%.200c', 'x'),
    CASE WHEN :state = 'ready' THEN 'ready' WHEN x % 10 = 0 THEN 'dead_letter'
        ELSE 'completed' END,
    1, 3, :now - x * 1000, CASE WHEN :state = 'ready' THEN :now - x * 1000 END, 1,
    CASE WHEN :state = 'ready' THEN NULL ELSE :now - 86400000 - x END,
    :now - x * 1000, :now - x * 1000
FROM g
"""
_LOAD = (("busy", "finished", FINISHED), ("busy", "ready", 500), ("other", "finished", 200))


@pytest.fixture(params=("sqlite", "postgresql"))
def loaded(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A queue database of its own holding :data:`_LOAD`, analysed."""
    if request.param == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        url = template.copy_to(tmp_path / "queue.db")
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            for queue, state, n in _LOAD:
                conn.execute(_SQLITE_ROWS, {"queue": queue, "state": state, "n": n, "now": NOW})
            conn.execute("ANALYZE")
        yield request.param, url
        return
    with pg_database(migrated=True) as url:
        with psycopg.connect(_dsn(url), autocommit=True) as conn:
            for queue, state, n in _LOAD:
                conn.execute(_PG_ROWS, {"queue": queue, "state": state, "n": n, "now": NOW})
            conn.execute("VACUUM ANALYZE caravel_jobs")
        yield request.param, url


def _dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def _text(backend: str, statement: sa.Select[Any]) -> str:
    dialect = postgresql.dialect() if backend == "postgresql" else sqlite.dialect()
    return str(statement.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))


def _pg_nodes(url: str, text: str) -> list[dict[str, Any]]:
    with psycopg.connect(_dsn(url), autocommit=True) as conn:
        row = conn.execute("EXPLAIN (FORMAT JSON) " + text).fetchone()  # type: ignore[arg-type]
    assert row is not None

    def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield plan
        for child in plan.get("Plans", []):
            yield from nodes(child)

    return list(nodes(row[0][0]["Plan"]))


def _sqlite_plan(url: str, text: str) -> list[str]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return [str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + text)]


def _jobs_reads(backend: str, url: str, text: str) -> list[str]:
    """How the plan reads the jobs table: ``"<node> <index>"`` per PostgreSQL scan node, SQLite's
    lines naming the table."""
    if backend == "postgresql":
        return [
            f"{n['Node Type']} {n.get('Index Name')}"
            for n in _pg_nodes(url, text)
            if n.get("Relation Name") == "caravel_jobs"
        ]
    return [line for line in _sqlite_plan(url, text) if "caravel_jobs" in line]


CREATED, DEAD = "ix_caravel_jobs_created", "ix_caravel_jobs_dead"
QUEUES = ["busy", "other"]
#: A listing and the index it reads.
LISTINGS = {
    "every job, newest first": (JobFilter(limit=51), CREATED),
    "every job, oldest first": (JobFilter(limit=51, oldest_first=True), CREATED),
    "a second page": (JobFilter(limit=51, offset=50), CREATED),
    "completed jobs": (JobFilter(state=JobState.COMPLETED, limit=51), CREATED),
    "a tenant's jobs": (JobFilter(tenant_id="tenant", limit=51), CREATED),
    "a queue's jobs": (JobFilter(queue="other", limit=51), CREATED),
    "a queue's jobs, oldest first": (JobFilter(queue="busy", limit=51, oldest_first=True), CREATED),
    "dead letters": (JobFilter(state=JobState.DEAD_LETTER, limit=51), DEAD),
    "jobs shown as dead letters": (JobFilter(shown="dead_letter", now=NOW, limit=51), DEAD),
    # Either index serves it in order; the planner weighs how rare the queue's dead letters are.
    "dead letters of a queue": (
        JobFilter(queue="busy", state=JobState.DEAD_LETTER, limit=51, oldest_first=True),
        (DEAD, CREATED),
    ),
}


@pytest.mark.parametrize(("where", "index"), LISTINGS.values(), ids=list(LISTINGS))
def test_a_listing_reads_a_page_of_a_creation_index_and_sorts_nothing(
    loaded: tuple[str, str], where: JobFilter, index: str | tuple[str, str]
) -> None:
    backend, url = loaded
    indexes = (index,) if isinstance(index, str) else index
    merged = queries.listed_by_queue(where)
    text = _text(backend, queries.job_list(where, QUEUES if merged else None))
    reads = _jobs_reads(backend, url, text)
    assert reads, "the plan does not read the jobs table"
    assert all(any(name in line for name in indexes) for line in reads), reads
    if backend == "postgresql":
        # Each stretch is read in the index's order; only the merged pages (at most
        # ``limit + offset`` rows per queue) are sorted.
        nodes = _pg_nodes(url, text)
        assert all(n["Node Type"] != "Seq Scan" for n in nodes), nodes
        scans = [n for n in nodes if n.get("Relation Name") == "caravel_jobs"]
        assert all(n["Node Type"] in ("Index Scan", "Index Scan Backward") for n in scans), scans
        if index == CREATED:
            assert all("queue" in n.get("Index Cond", "") for n in scans), scans
        sorts = [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")]
        assert len(sorts) <= (1 if merged else 0), sorts
    else:
        # A stretch of each queue ("SCAN" would be the whole index), in the index's order: a
        # temporary B-tree only for the merged pages (SQLite may sort each queue's page on its
        # own before merging them).
        plan = _sqlite_plan(url, text)
        if index == CREATED:
            assert all(line.startswith("SEARCH") and "queue=?" in line for line in reads), reads
        orders = [line for line in plan if "TEMP B-TREE" in line]
        assert len(orders) <= (len(QUEUES) + 1 if merged else 0), plan


def test_an_unfiltered_listing_finds_the_queues_by_skipping_through_the_created_index(
    loaded: tuple[str, str],
) -> None:
    backend, url = loaded
    text = _text(backend, queries.listed_queue_names())
    reads = _jobs_reads(backend, url, text)
    assert reads, "the plan does not read the jobs table"
    if backend == "postgresql":
        scans = [n for n in _pg_nodes(url, text) if n.get("Relation Name") == "caravel_jobs"]
        assert all(n["Node Type"].startswith("Index Only Scan") for n in scans), scans
        assert any(n["Node Type"] == "Limit" for n in _pg_nodes(url, text)), text
    else:
        assert all("COVERING INDEX" in line for line in reads), reads


@pytest.mark.parametrize("queue", [None, "busy"])
def test_the_throughput_read_reads_only_the_window_of_the_finished_index(
    loaded: tuple[str, str], queue: str | None
) -> None:
    backend, url = loaded
    query = ThroughputQuery(queue, NOW - 24 * HOUR, NOW, HOUR)
    queues = ["busy", "other"] if queue is None else [queue]
    text = _text(backend, queries.throughput(query, queues))
    reads = _jobs_reads(backend, url, text)
    assert reads, "the plan does not read the jobs table"
    assert all("ix_caravel_jobs_finished" in line for line in reads), reads
    if backend == "postgresql":
        # Probed per queue and state: the queue is part of the index condition, not a filter
        # over the whole index.
        scans = [n for n in _pg_nodes(url, text) if n.get("Index Name")]
        assert all("queue" in n.get("Index Cond", "") for n in scans), scans
    else:
        # A range of each queue's entries ("SCAN" would be the whole index).
        assert all(line.startswith("SEARCH") for line in reads), reads
        assert all("finished_at>" in line for line in reads), reads


def test_the_queues_with_finished_jobs_are_found_by_skipping_through_the_index(
    loaded: tuple[str, str],
) -> None:
    backend, url = loaded
    text = _text(backend, queries.finished_queue_names())
    reads = _jobs_reads(backend, url, text)
    assert reads, "the plan does not read the jobs table"
    assert all("ix_caravel_jobs_finished" in line for line in reads), reads
    if backend == "postgresql":
        # Each probe stops at its first entry.
        assert any(n["Node Type"] == "Limit" for n in _pg_nodes(url, text)), text
