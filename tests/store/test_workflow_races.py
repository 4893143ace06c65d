"""A workflow's fan-in under concurrent finishers, on every SQL database: the dependencies are
finished at the same moment by different transactions on two stores (two engines, as two worker
processes would have), and the fan-in step is released exactly once, its count never below
zero. (SQLite has one writer at a time: its finishers queue for the file's lock instead.)

An audit trigger the test adds to the step table records every release (``released_at`` set),
so a second release of the same step could not go unseen, whichever path made it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy as sa

from caravel._ids import uuid7
from caravel.limits import HELD_DUE_AT
from caravel.store import open_store
from caravel.store.workflows.records import NewStep, NewWorkflow
from tests.store.conformance.builders import T0, TENANT, claim, new_job
from tests.support.databases import SqliteTemplate, mariadb_database, pg_database, sync_engine

ROUNDS = 8
WIDTH = 12

_AUDIT = {
    "postgresql": (
        "CREATE TABLE wf_audit (job_id UUID NOT NULL)",
        "CREATE FUNCTION wf_audit_release() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN INSERT INTO wf_audit VALUES (NEW.job_id); RETURN NULL; END $$",
        "CREATE TRIGGER wf_audit AFTER UPDATE OF released_at ON caravel_workflow_steps"
        " FOR EACH ROW WHEN (OLD.released_at IS NULL AND NEW.released_at IS NOT NULL)"
        " EXECUTE FUNCTION wf_audit_release()",
    ),
    "sqlite": (
        "CREATE TABLE wf_audit (job_id TEXT NOT NULL)",
        "CREATE TRIGGER wf_audit AFTER UPDATE OF released_at ON caravel_workflow_steps"
        " WHEN OLD.released_at IS NULL AND NEW.released_at IS NOT NULL"
        " BEGIN INSERT INTO wf_audit VALUES (NEW.job_id); END",
    ),
    "mariadb": (
        "CREATE TABLE wf_audit (job_id UUID NOT NULL)",
        "CREATE TRIGGER wf_audit AFTER UPDATE ON caravel_workflow_steps FOR EACH ROW"
        " BEGIN IF OLD.released_at IS NULL AND NEW.released_at IS NOT NULL THEN"
        " INSERT INTO wf_audit VALUES (NEW.job_id); END IF; END",
    ),
}


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def race_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh migrated database of its own (the audit trigger must not reach other tests)."""
    if request.param == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        yield template.copy_to(tmp_path / "queue.db")
        return
    databases = {"postgresql": pg_database, "mariadb": mariadb_database}
    with databases[request.param](migrated=True) as url:
        yield url


def _run(url: str, *statements: str) -> list[Any]:
    engine = sync_engine(url)
    try:
        with engine.begin() as conn:
            rows: list[Any] = []
            for statement in statements:
                result = conn.exec_driver_sql(statement)
                rows = list(result) if result.returns_rows else []
            return rows
    finally:
        engine.dispose()


@pytest.fixture
async def two_stores(race_url: str) -> AsyncIterator[tuple[Any, Any]]:
    _run(race_url, *_AUDIT[sa.make_url(race_url).get_backend_name()])
    first, second = open_store(race_url), open_store(race_url)
    try:
        yield first.inner, second.inner
    finally:
        await first.close()
        await second.close()


async def test_dependencies_finished_at_once_release_their_fan_in_exactly_once(
    two_stores: tuple[Any, Any], race_url: str
) -> None:
    first, second = two_stores
    for round_ in range(ROUNDS):
        base = round_ * (WIDTH + 1)
        deps = [new_job(base + n) for n in range(WIDTH)]
        fan_in = new_job(base + WIDTH)
        steps = [NewStep(job, "dep", n, ()) for n, job in enumerate(deps)]
        steps.append(NewStep(fan_in, "fan-in", None, tuple(job.id for job in deps)))
        workflow = NewWorkflow(uuid7(T0), TENANT, None, None, "a" * 64, T0, steps)
        await first.workflow_insert(workflow)
        now = T0 + 1_000 * (round_ + 1)
        claimed = (await claim(first, now, 100)).claimed
        assert {c.job_id for c in claimed} == {job.id for job in deps}

        finishes = [
            (first if n % 2 else second).job_complete_many([c.lease], now)
            for n, c in enumerate(claimed)
        ]
        assert all(len(done) == 1 for done in await asyncio.gather(*finishes))

        audit = _run(race_url, "SELECT job_id FROM wf_audit")
        assert [UUID(str(row[0])) for row in audit].count(fan_in.id) == 1
        key = fan_in.id.hex if race_url.startswith("sqlite") else str(fan_in.id)
        (step,) = _run(
            race_url,
            f"SELECT waiting, released_at FROM caravel_workflow_steps WHERE job_id = '{key}'",
        )
        assert tuple(step) == (0, now)
        (job,) = _run(race_url, f"SELECT due_at FROM caravel_jobs WHERE id = '{key}'")
        assert job[0] == now != HELD_DUE_AT
        (released,) = (await claim(first, now, 100)).claimed
        assert released.job_id == fan_in.id
        await first.job_complete_many([released.lease], now)
