"""What one dependency's finish costs a 10,000-wide fan-in, on every SQL database, counted, not
timed: the release trigger touches the finished job's own edge and its child's step row, and
reads nothing of the fan-in's other 9,999 edges.

* PostgreSQL: the finishing transaction's own table statistics (``pg_stat_xact_user_tables``):
  no sequential scan of the edge or step table, one row of each updated, a handful fetched.
* SQLite: the virtual machine instructions the finishing statement runs (its progress handler
  called on each), the same for a 10,000-wide fan-in as for a 10-wide one.
* MariaDB: the session's handler counters (rows read by key, next in an index, or in a table
  scan), the same for both widths.

Each finish is rolled back: it is measured, not kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from caravel._ids import uuid7
from caravel.store import open_store
from caravel.store.protocol import NewJob
from caravel.store.workflows.records import NewStep, NewWorkflow
from tests.store.conformance.builders import T0, TENANT, new_job
from tests.store.conformance.conftest import DATABASES
from tests.support.databases import sync_engine

pytestmark = pytest.mark.slow

SMALL, BIG = 10, 10_000
NOW = T0 + 5_000
_FINISH = (
    "UPDATE caravel_jobs SET state = 'completed', available_at = NULL, finished_at = {now},"
    " updated_at = {now} WHERE id = '{id}'"
)


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def cost_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return DATABASES[request.param](request, tmp_path)


async def _fan_in(url: str, width: int, start: int) -> NewJob:
    """A fan-in over ``width`` dependencies; one of them (not the last to finish)."""
    deps = [new_job(start + n) for n in range(width)]
    steps = [NewStep(job, "dep", n, ()) for n, job in enumerate(deps)]
    steps.append(NewStep(new_job(start + width), "fan-in", None, tuple(job.id for job in deps)))
    opened = open_store(url)
    try:
        workflow = NewWorkflow(uuid7(T0), TENANT, None, None, "a" * 64, T0, steps)
        await opened.inner.workflow_insert(workflow)  # type: ignore[attr-defined]
    finally:
        await opened.close()
    return deps[width // 2]


def _finish_sql(url: str, job: NewJob) -> str:
    key = job.id.hex if url.startswith("sqlite") else str(job.id)
    return _FINISH.format(now=NOW, id=key)


def _pg_cost(url: str, job: NewJob) -> dict[str, tuple[int, ...]]:
    engine = sync_engine(url)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE caravel_workflow_edges")
            conn.exec_driver_sql("ANALYZE caravel_workflow_steps")
            conn.commit()
            conn.exec_driver_sql(_finish_sql(url, job))
            rows = conn.exec_driver_sql(
                "SELECT relname, seq_scan, COALESCE(idx_tup_fetch, 0), n_tup_upd"
                " FROM pg_stat_xact_user_tables"
                " WHERE relname IN ('caravel_workflow_edges', 'caravel_workflow_steps')"
            )
            found = {row[0]: tuple(row[1:]) for row in rows}
            conn.rollback()
            return found
    finally:
        engine.dispose()


def _sqlite_instructions(url: str, job: NewJob) -> int:
    engine = sync_engine(url)
    try:
        with engine.connect() as conn:
            raw: Any = conn.connection.driver_connection
            count = [0]

            def tick() -> int:
                count[0] += 1
                return 0

            raw.set_progress_handler(tick, 1)
            conn.exec_driver_sql(_finish_sql(url, job))
            raw.set_progress_handler(None, 1)
            conn.rollback()
            return count[0]
    finally:
        engine.dispose()


_HANDLERS = ("Handler_read_key", "Handler_read_next", "Handler_read_rnd_next", "Handler_update")


def _mariadb_handlers(url: str, job: NewJob) -> dict[str, int]:
    engine = sync_engine(url)
    try:
        with engine.connect() as conn:

            def status() -> dict[str, int]:
                rows = conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Handler%%'")
                return {row[0]: int(row[1]) for row in rows if row[0] in _HANDLERS}

            before = status()
            conn.exec_driver_sql(_finish_sql(url, job))
            after = status()
            conn.rollback()
            return {name: after[name] - before[name] for name in _HANDLERS}
    finally:
        engine.dispose()


async def test_a_finish_costs_a_wide_fan_in_what_it_costs_a_narrow_one(cost_url: str) -> None:
    small = await _fan_in(cost_url, SMALL, 0)
    big = await _fan_in(cost_url, BIG, 100)
    backend = sa.make_url(cost_url).get_backend_name()
    if backend == "postgresql":
        cost = _pg_cost(cost_url, big)
        # (sequential scans, rows fetched by index, rows updated) per side table
        assert cost["caravel_workflow_edges"][0] == 0
        assert cost["caravel_workflow_edges"][1] <= 4
        assert cost["caravel_workflow_edges"][2] == 1
        assert cost["caravel_workflow_steps"][0] == 0
        assert cost["caravel_workflow_steps"][1] <= 4
        assert cost["caravel_workflow_steps"][2] == 1
    elif backend == "sqlite":
        narrow = _sqlite_instructions(cost_url, small)
        wide = _sqlite_instructions(cost_url, big)
        assert wide <= narrow * 1.2, (narrow, wide)
    else:
        narrow_reads = _mariadb_handlers(cost_url, small)
        wide_reads = _mariadb_handlers(cost_url, big)
        assert wide_reads == narrow_reads, (narrow_reads, wide_reads)
