"""The claim of ready jobs reads its batch from the rank index and nothing else.

Ready jobs are claimed in order of their rank (due time moved earlier by priority), an
expression only ``ix_caravel_jobs_ranked`` holds in order; any other plan would read every due
job of the queue and sort them. The plan is read from the database (PostgreSQL's ``EXPLAIN
ANALYZE`` on a connection with the server's default planner settings, SQLite's ``EXPLAIN QUERY
PLAN``, MariaDB's ``ANALYZE FORMAT=JSON`` of each statement that picks the claim's rows) after
loading a realistic table with one bulk statement per state and analysing it:
a busy queue of due jobs with every priority, a long finished history, and a queue holding only
jobs delayed far into the future, which a claim must not read through either.

The claim of ``"any"`` reads both indexes, at most a batch from each, and sorts only those.
MariaDB picks a claim's rows with a statement per source (expired leases first), each reading
its own index in order, so it sorts nothing.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.dialects import postgresql, sqlite

from caravel.store.base import SqlStore
from caravel.store.mariadb.execution import PICKED, Picked, _picked_update
from caravel.store.protocol import ClaimSource
from tests.support import mariadb_plans, open_queue
from tests.support.databases import SqliteTemplate, mariadb_connect, mariadb_database, pg_database

READY = 20_000  # due jobs of "busy", priorities -100 to 100
FINISHED = 20_000  # completed jobs of "busy"
DELAYED = 5_000  # jobs of "later", due a day from NOW
EXPIRED = 50  # running jobs of "busy" whose lease expired
NOW = 1_900_000_000_000
DAY = 86_400_000
LIMIT = 10

# ``n`` rows of one queue in one state; ready rows are due (running rows' leases expire) from
# ``due`` on, a second apart backwards, with priorities -100 to 100 in turn.
_PG_ROWS = """
INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, payload, state, attempt,
    max_attempts, due_at, available_at, lease_token, finished_at, created_at, updated_at,
    priority)
SELECT gen_random_uuid(), %(queue)s, 't.v1', 'tenant', repeat('x', 200), %(state)s::varchar,
    0, 3, %(due)s - g * 1000,
    CASE WHEN %(state)s::varchar IN ('ready', 'running') THEN %(due)s - g * 1000 END, 0,
    CASE WHEN %(state)s::varchar = 'completed' THEN %(due)s END, %(due)s, %(due)s,
    (g %% 201) - 100
FROM generate_series(1, %(n)s) AS g
"""
_SQLITE_ROWS = """
WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < :n)
INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, payload, state, attempt,
    max_attempts, due_at, available_at, lease_token, finished_at, created_at, updated_at,
    priority)
SELECT lower(hex(randomblob(16))), :queue, 't.v1', 'tenant', printf('%.200c', 'x'), :state,
    0, 3, :due - x * 1000, CASE WHEN :state IN ('ready', 'running') THEN :due - x * 1000 END, 0,
    CASE WHEN :state = 'completed' THEN :due END, :due, :due, (x % 201) - 100
FROM g
"""
# MariaDB's sequence engine numbers the rows (its numbers are unsigned: made signed, so the
# priority's arithmetic may go below zero).
_MARIADB_ROWS = """
INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, payload, state, attempt,
    max_attempts, due_at, available_at, lease_token, finished_at, created_at, updated_at,
    priority)
SELECT UUID(), %(queue)s, 't.v1', 'tenant', REPEAT('x', 200), %(state)s,
    0, 3, %(due)s - g.x * 1000,
    CASE WHEN %(state)s IN ('ready', 'running') THEN %(due)s - g.x * 1000 END, 0,
    CASE WHEN %(state)s = 'completed' THEN %(due)s END, %(due)s, %(due)s, MOD(g.x, 201) - 100
FROM (SELECT CAST(seq AS SIGNED) AS x FROM seq_1_to_{n}) AS g
"""
_LOAD = (
    ("busy", "ready", READY, NOW),
    ("busy", "completed", FINISHED, NOW),
    ("busy", "running", EXPIRED, NOW),
    ("later", "ready", DELAYED, NOW + 2 * DAY),
)


@pytest.fixture(params=("sqlite", "postgresql", pytest.param("mariadb", marks=pytest.mark.mariadb)))
def loaded(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A queue database of its own holding :data:`_LOAD`, analysed."""
    if request.param == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        url = template.copy_to(tmp_path / "queue.db")
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            for queue, state, n, due in _LOAD:
                conn.execute(_SQLITE_ROWS, {"queue": queue, "state": state, "n": n, "due": due})
            conn.execute("ANALYZE")
        yield request.param, url
        return
    if request.param == "mariadb":
        with mariadb_database(migrated=True) as url:
            with mariadb_connect(url) as conn, conn.cursor() as cursor:
                for queue, state, n, due in _LOAD:
                    values = {"queue": queue, "state": state, "due": due}
                    cursor.execute(_MARIADB_ROWS.format(n=int(n)), values)
                cursor.execute("ANALYZE TABLE caravel_jobs")
            yield request.param, url
        return
    with pg_database(migrated=True) as url:
        with psycopg.connect(_dsn(url), autocommit=True) as conn:
            for queue, state, n, due in _LOAD:
                conn.execute(_PG_ROWS, {"queue": queue, "state": state, "n": n, "due": due})
            conn.execute("VACUUM ANALYZE caravel_jobs")
        yield request.param, url


def _dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


async def _claim_sql(
    url: str, backend: str, queue: str, source: ClaimSource = "ready"
) -> tuple[str, dict[str, Any]]:
    """The store's own ready claim (its limit written in, as the PostgreSQL store writes it)
    and the values it binds."""
    async with open_queue(url) as opened:
        store = getattr(opened.store, "inner", opened.store)
        assert isinstance(store, SqlStore)
        statement = store._claim_statement(source, literal_limit=False)
    if backend == "postgresql":
        dialect: Any = postgresql.psycopg.dialect()  # type: ignore[attr-defined]
        limit = "%(b_limit)s"
    else:
        dialect = sqlite.dialect(paramstyle="named")
        limit = ":b_limit"
    compiled = statement.compile(dialect=dialect)
    values = {"b_queue": queue, "b_now": NOW, "b_expires": NOW + 30_000}
    return str(compiled).replace(limit, str(LIMIT)), {**compiled.params, **values}


async def _mariadb_claim(url: str, source: ClaimSource = "ready") -> Picked:
    async with open_queue(url) as opened:
        store = getattr(opened.store, "inner", opened.store)
        assert isinstance(store, SqlStore)
        statement = store._claim_statement(source, literal_limit=False)
    assert isinstance(statement, Picked)
    return statement


async def _mariadb_picks(
    url: str, queue: str, source: ClaimSource = "ready"
) -> list[tuple[str, dict[str, Any]]]:
    """The statements the MariaDB store's claim picks its rows with, one per source in the
    order it runs them, and the values they bind."""
    values = {"b_queue": queue, "b_now": NOW, "b_limit": LIMIT}
    picks = []
    for pick in (await _mariadb_claim(url, source)).picks:
        compiled = pick.compile(dialect=mariadb_plans.DIALECT)
        picks.append((str(compiled), {**compiled.params, **values}))
    return picks


def _assert_mariadb_pick(plan: dict[str, Any], index: str, read: int) -> None:
    """The pick read ``read`` entries of ``index``, in order, and no other jobs."""
    assert not mariadb_plans.sorts(plan), plan
    (table,) = mariadb_plans.tables(plan)  # the limits row is probed before the plan runs
    assert table["table_name"] == "caravel_jobs", plan
    assert table.get("key") == index, plan
    assert table["access_type"] == "range", plan
    assert (table["r_loops"], table["r_rows"]) == (1, read), plan


async def _assert_mariadb_update_by_key(url: str, pick: tuple[str, dict[str, Any]]) -> None:
    """The claim's update of the rows it picked finds each by its primary key."""
    update = _picked_update((await _mariadb_claim(url)).update).update
    # The picked ids as PyMySQL binds a list (the update's IN list is expanded when it runs).
    compiled = update.compile(dialect=mariadb_plans.DIALECT)
    text = str(compiled).replace(f"(__[POSTCOMPILE_{PICKED}])", "%(picked)s")
    values = {**compiled.params, "b_now": NOW, "b_expires": NOW + 30_000, "b_worker": None}
    plan = mariadb_plans.plan(url, text, values, after=pick)
    (table,) = mariadb_plans.tables(plan)  # a ready claim takes over no lease: no attempts counted
    assert table["table_name"] == "caravel_jobs", plan
    assert (table.get("key"), table["access_type"], table["r_rows"]) == ("PRIMARY", "range", LIMIT)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _pg_plan(url: str, text: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    # ANALYZE runs the claim (the rows read are the proof); the transaction is rolled back.
    with psycopg.connect(_dsn(url)) as conn:
        explain = "EXPLAIN (ANALYZE, FORMAT JSON) " + text
        row = conn.execute(explain, values).fetchone()  # type: ignore[call-overload]
        conn.rollback()
    assert row is not None
    return list(_nodes(row[0][0]["Plan"]))


def _sqlite_plan(url: str, text: str, values: dict[str, Any]) -> list[str]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return [str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + text, values)]


#: The plain claim looks up its queue's limits row first (a limited queue is claimed by the
#: limited claim): one probe of the limits table's key per source, finding nothing.
LIMITS_KEY = "pk_caravel_queue_limits"


def _assert_limits_probed_once(plan: list[dict[str, Any]]) -> None:
    probes = [n for n in plan if n.get("Index Name") == LIMITS_KEY]
    assert probes
    assert all((n["Actual Loops"], n["Actual Rows"]) == (1, 0) for n in probes), probes


@pytest.mark.parametrize(("queue", "claimed"), [("busy", LIMIT), ("later", 0)])
async def test_the_ready_claim_reads_its_batch_from_the_rank_index_only(
    loaded: tuple[str, str], queue: str, claimed: int
) -> None:
    backend, url = loaded
    if backend == "mariadb":
        # The ready claim is one pick; the far-future queue's rank is past the bound at once.
        ((text, values),) = await _mariadb_picks(url, queue)
        _assert_mariadb_pick(
            mariadb_plans.plan(url, text, values), "ix_caravel_jobs_ranked", claimed
        )
        if claimed:
            await _assert_mariadb_update_by_key(url, (text, values))
        return
    text, values = await _claim_sql(url, backend, queue)
    if backend == "postgresql":
        plan = _pg_plan(url, text, values)
        assert plan[0]["Actual Rows"] == claimed
        types = {n["Node Type"] for n in plan}
        assert "Sort" not in types, types
        assert "Seq Scan" not in types, types
        # The picked rows are then found by primary key (by a bitmap under the server's
        # defaults; the store's own claim connection turns bitmaps off).
        indexes = {n["Index Name"] for n in plan if "Index Name" in n}
        assert indexes == {"ix_caravel_jobs_ranked", "pk_caravel_jobs", LIMITS_KEY}, indexes
        _assert_limits_probed_once(plan)
        (ranked,) = [n for n in plan if n.get("Index Name") == "ix_caravel_jobs_ranked"]
        # The batch, and nothing of the far-future queue: the rank's bound stops the scan.
        assert ranked["Actual Rows"] + ranked.get("Rows Removed by Filter", 0) == claimed
        return
    plan = _sqlite_plan(url, text, values)
    reads = [line for line in plan if "caravel_jobs" in line]
    assert any(
        re.fullmatch(r"SEARCH caravel_jobs USING INDEX ix_caravel_jobs_ranked \(queue=\? .*", line)
        for line in reads
    ), plan
    assert not any(line.startswith("SCAN caravel_jobs") for line in reads), plan
    assert not any("TEMP B-TREE" in line for line in plan), plan


async def test_the_claim_of_any_reads_at_most_a_batch_from_each_index(
    loaded: tuple[str, str],
) -> None:
    backend, url = loaded
    if backend == "mariadb":
        # The ready jobs are picked only when the expired leases are fewer than a batch (here
        # they are not), but neither pick may read more than a batch.
        expired, ready = await _mariadb_picks(url, "busy", "any")
        _assert_mariadb_pick(mariadb_plans.plan(url, *expired), "ix_caravel_jobs_leases", LIMIT)
        _assert_mariadb_pick(mariadb_plans.plan(url, *ready), "ix_caravel_jobs_ranked", LIMIT)
        return
    text, values = await _claim_sql(url, backend, "busy", "any")
    if backend == "postgresql":
        plan = _pg_plan(url, text, values)
        assert plan[0]["Actual Rows"] == LIMIT
        assert "Seq Scan" not in {n["Node Type"] for n in plan}
        reads = {n["Index Name"]: _read(n) for n in plan if "Index Name" in n}
        assert set(reads) == {
            "ix_caravel_jobs_leases",
            "ix_caravel_jobs_ranked",
            "pk_caravel_jobs",
            LIMITS_KEY,
        }
        _assert_limits_probed_once(plan)
        assert reads["ix_caravel_jobs_leases"] == reads["ix_caravel_jobs_ranked"] == LIMIT
        sorts = [n for n in plan if n["Node Type"] == "Sort"]
        assert all(sum(c["Actual Rows"] for c in n["Plans"]) <= 2 * LIMIT for n in sorts)
        return
    plan = _sqlite_plan(url, text, values)
    reads = [line for line in plan if "caravel_jobs" in line]
    for index in ("ix_caravel_jobs_leases", "ix_caravel_jobs_ranked"):
        assert any(line.startswith(f"SEARCH caravel_jobs USING INDEX {index}") for line in reads)
    assert not any(line.startswith("SCAN caravel_jobs") for line in reads), plan


def _read(node: dict[str, Any]) -> int:
    rows: int = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
    return rows
