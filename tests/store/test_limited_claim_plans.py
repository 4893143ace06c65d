"""PostgreSQL's plans for the claims of a per-key limited or fair queue stay proportional to
their candidates and the jobs running, on a table whose statistics are stale.

Each key's running jobs once came from a common table expression joined to the candidates by
key. On a table analysed while it was nearly empty, the planner took both sides for one row and
chose a nested loop: with 500 keys running and 2,000 candidates, a million key comparisons, and
a fair claim of 500 went from 0.1 s to 0.45 s. The running jobs are now rows among the
candidates, counted per key by a window. Each test captures the plan of the claim statement the
store itself sends (``auto_explain``, reported to the session as a notice).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import event

from caravel.flow import ConcurrencyLimit
from caravel.store import open_store
from tests.store.conformance.builders import QUEUE, claim
from tests.support.databases import pg_database

NOW = 1_900_000_000_000
KEYS = 1000
BATCH = 500

# ``n`` ready jobs of QUEUE, job ``g`` under key ``k<g % KEYS>``, due a little apart.
_ROWS = """
INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, payload, state, attempt,
    max_attempts, due_at, available_at, lease_token, created_at, updated_at, priority,
    partition_key)
SELECT gen_random_uuid(), %(queue)s, 't.v1', 'tenant', '{}', 'ready', 0, 3,
    %(due)s - g * 10, %(due)s - g * 10, 0, %(due)s, %(due)s, 0, 'k' || (g %% %(keys)s)
FROM generate_series(1, %(n)s) AS g
"""


@pytest.fixture
def stale_pg_url() -> Iterator[str]:
    """A migrated database whose jobs table was analysed holding five jobs, then filled with
    100,000 over :data:`KEYS` keys, and never analysed again."""
    with pg_database(migrated=True) as url:
        dsn = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE caravel_jobs SET (autovacuum_enabled = false)")
            conn.execute(_ROWS, {"queue": QUEUE, "due": NOW, "n": 5, "keys": KEYS})
            conn.execute("ANALYZE caravel_jobs")
            conn.execute(_ROWS, {"queue": QUEUE, "due": NOW, "n": 100_000, "keys": KEYS})
        yield url


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


@pytest.mark.parametrize(
    "limit",
    [ConcurrencyLimit(queue=QUEUE, fair=True), ConcurrencyLimit(queue=QUEUE, per_key=2)],
    ids=["fair", "per_key"],
)
async def test_a_limited_claim_counts_running_keys_without_comparing_every_pair(
    stale_pg_url: str, limit: ConcurrencyLimit
) -> None:
    opened = open_store(stale_pg_url)
    store: Any = opened.inner
    plans: list[dict[str, Any]] = []

    def explain_claims(dbapi: Any, _record: Any) -> None:
        dbapi.autocommit = True
        with dbapi.cursor() as cursor:
            cursor.execute("LOAD 'auto_explain'")
            cursor.execute("SET auto_explain.log_min_duration = 0")
            cursor.execute("SET auto_explain.log_analyze = on")
            cursor.execute("SET auto_explain.log_format = json")
            cursor.execute("SET auto_explain.log_level = notice")
        dbapi.autocommit = False

        def keep(diagnostic: psycopg.errors.Diagnostic) -> None:
            text = diagnostic.message_primary or ""
            if "plan:" in text and "UPDATE caravel_jobs" in text:
                plans.append(json.loads(text.split("plan:", 1)[1])["Plan"])

        dbapi.driver_connection.add_notice_handler(keep)

    event.listen(store.engine.sync_engine, "connect", explain_claims)
    try:
        await store.queue_limit_set(limit, NOW)
        first = await claim(store, NOW, BATCH, limited=True)
        plans.clear()
        second = await claim(store, NOW + 1, BATCH, limited=True)
    finally:
        await opened.close()

    assert len(first.claimed) == len(second.claimed) == BATCH
    assert len({job.job_id for job in first.claimed + second.claimed}) == 2 * BATCH
    assert len(plans) == 1
    nodes = list(_nodes(plans[0]))
    compared = sum(node.get("Rows Removed by Join Filter", 0) for node in nodes)
    assert compared < BATCH, compared  # a join by key compared 500 running with each candidate
    # The running jobs are read once, from the leases index.
    leases = [n for n in nodes if n.get("Index Name") == "ix_caravel_jobs_leases"]
    assert sum(n["Actual Rows"] * n["Actual Loops"] for n in leases) == BATCH
