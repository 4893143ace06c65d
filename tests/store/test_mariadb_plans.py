"""On MariaDB, an enqueue's checks for a job already there read one entry of a unique index.

A job repeated under an idempotency key is kept out by ``uq_caravel_jobs_idempotency`` and
then looked up by its key to compare its content; a job with a pending key is settled against
the job pending under that key, which ``uq_caravel_jobs_pending`` holds through the generated
column ``pending_ready`` (MariaDB has no partial index). Each lookup must read that index's
entry for the key and nothing else, however many jobs the tenant has: the plans are read with
``ANALYZE FORMAT=JSON`` (which runs the statement) on a table of many jobs of one queue and
tenant, ready ones with keys and a finished history under the same pending keys.

(The claims' plans on MariaDB are read by ``tests/store/test_claim_plans.py``.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import pytest

from caravel.store import queries
from caravel.store.base import SqlStore
from caravel.store.inserts.pending import _pending_now, kept_key, upsert_replace
from caravel.store.schema import jobs
from caravel.store.values import NewJob
from tests.support import mariadb_plans, open_queue
from tests.support.databases import mariadb_connect, mariadb_database

pytestmark = pytest.mark.mariadb

JOBS = 20_000  # ready jobs of "busy" and as many completed ones
NOW = 1_900_000_000_000

# Each state's jobs have idempotency keys of their own ("<state>-i<n>") and share the pending
# keys "p<n>": only the ready job is pending under its key, the completed one is history.
_ROWS = """
INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, payload, state, attempt,
    max_attempts, due_at, available_at, lease_token, finished_at, created_at, updated_at,
    idempotency_key, pending_key)
SELECT UUID(), 'busy', 't.v1', 'tenant', REPEAT('x', 200), %(state)s, 0, 3, %(now)s,
    CASE WHEN %(state)s = 'ready' THEN %(now)s END, 0,
    CASE WHEN %(state)s = 'completed' THEN %(now)s END, %(now)s, %(now)s,
    CONCAT(%(state)s, '-i', g.seq), CONCAT('p', g.seq)
FROM seq_1_to_{n} AS g
"""

#: How a unique key is read for one value: while the plan is made (``const``) or once per row
#: of the outer query (``eq_ref``).
_BY_UNIQUE_KEY = ("const", "eq_ref")


@pytest.fixture(scope="module")
def loaded() -> Iterator[str]:
    with mariadb_database(migrated=True) as url:
        with mariadb_connect(url) as conn, conn.cursor() as cursor:
            for state in ("ready", "completed"):
                cursor.execute(_ROWS.format(n=JOBS), {"state": state, "now": NOW})
            cursor.execute("ANALYZE TABLE caravel_jobs")
        yield url


async def _store(url: str) -> SqlStore[Any]:
    async with open_queue(url) as opened:
        store = getattr(opened.store, "inner", opened.store)
    assert isinstance(store, SqlStore)
    return store


def _only_access(plan: dict[str, Any]) -> dict[str, Any]:
    (table,) = mariadb_plans.tables(plan)
    assert table["table_name"] in ("caravel_jobs", "pending"), plan
    return table


def _assert_nothing_read(plan: dict[str, Any]) -> None:
    """The unique key held no entry for the value: found so while the plan was made, and no
    table was read."""
    assert not mariadb_plans.tables(plan), plan
    assert "const table" in str(plan), plan


@pytest.mark.parametrize("n", [1, 500])
async def test_the_idempotency_lookup_reads_one_entry_per_key(loaded: str, n: int) -> None:
    # 500 keys: one lookup of the most keys the store looks up at a time.
    assert (await _store(loaded)).insert_chunk >= n
    keys = [("busy", "tenant", f"ready-i{k}") for k in range(1, n + 1)]
    text, values = mariadb_plans.compiled(queries.existing_by_key(keys), {})
    table = _only_access(mariadb_plans.plan(loaded, text, values))
    assert table.get("key") == "uq_caravel_jobs_idempotency", table
    if n == 1:
        assert table["access_type"] in _BY_UNIQUE_KEY, table
    else:
        assert table["access_type"] == "range", table
        assert (table["r_loops"], table["r_rows"]) == (1, n), table
    assert table["used_key_parts"] == ["queue", "tenant_id", "idempotency_key"], table


async def test_a_job_inserted_again_under_its_id_is_looked_up_by_primary_key(loaded: str) -> None:
    with mariadb_connect(loaded) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT id FROM caravel_jobs WHERE idempotency_key = 'ready-i7'")
        ((job_id,),) = cursor.fetchall()
    text, values = mariadb_plans.compiled(queries.existing_by_id([job_id]), {})
    table = _only_access(mariadb_plans.plan(loaded, text, values))
    assert (table.get("key"), table["access_type"]) == ("PRIMARY", "const"), table


def _proposed(key: str) -> dict[str, Any]:
    """The values an upsert's probe binds for a job of ``key``."""
    return {
        "mariadb_new_queue": "busy",
        "mariadb_new_tenant_id": "tenant",
        "mariadb_new_pending_key": key,
        "mariadb_new_job_type": "t.v1",
    }


@pytest.mark.parametrize("key", ["p77", "p-none"])
async def test_the_pending_upsert_locks_one_entry_of_the_pending_index(
    loaded: str, key: str
) -> None:
    # The probe of the upsert that replaces a pending job's content (a debounced enqueue):
    # a locking read, which a scan would run through every row another transaction holds.
    store = await _store(loaded)
    probe = upsert_replace(store._insert()).probe
    text, values = mariadb_plans.compiled(probe, _proposed(key))
    assert text.rstrip().endswith("FOR UPDATE"), text
    plan = mariadb_plans.plan(loaded, text, values)
    if key == "p-none":
        _assert_nothing_read(plan)
        return
    table = _only_access(plan)
    assert (table.get("key"), table["access_type"]) == ("uq_caravel_jobs_pending", "const"), table


@pytest.mark.parametrize("key", ["p77", "p-none"])
async def test_the_job_pending_under_a_key_is_read_from_the_pending_index(
    loaded: str, key: str
) -> None:
    job = NewJob(uuid4(), "busy", "t.v1", "tenant", None, "{}", 3, NOW, NOW, pending_key=key)
    text, values = mariadb_plans.compiled(_pending_now(job), {})
    plan = mariadb_plans.plan(loaded, text, values)
    if key == "p-none":
        _assert_nothing_read(plan)
        return
    table = _only_access(plan)
    assert (table.get("key"), table["access_type"]) == ("uq_caravel_jobs_pending", "const"), table


async def test_a_job_made_ready_again_checks_its_key_in_the_pending_index(loaded: str) -> None:
    # What a retry, snooze or replay sets a job's pending key to: here for a finished job whose
    # key has a job pending (so the check finds it), read as a SELECT of that expression.
    job = jobs.c
    statement = (
        jobs.select()
        .with_only_columns(job.id, kept_key().label("kept"))
        .where(job.idempotency_key == "completed-i77")
    )
    text, values = mariadb_plans.compiled(statement, {})
    plan = mariadb_plans.plan(loaded, text, values)
    accesses = {table["table_name"]: table for table in mariadb_plans.tables(plan)}
    assert set(accesses) == {"caravel_jobs", "pending"}, plan
    pending = accesses["pending"]
    assert pending.get("key") == "uq_caravel_jobs_pending", pending
    assert pending["access_type"] in (*_BY_UNIQUE_KEY, "ref"), pending
    assert pending["r_rows"] <= 1, pending
