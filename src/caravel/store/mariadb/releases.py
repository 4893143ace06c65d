"""Releasing held jobs on MariaDB, in the transaction of the change that releases them.

On the other databases a trigger on the jobs table releases a workflow's held step when its
last dependency finishes (:mod:`caravel.migrations.workflow_triggers`); chains and batches are
workflows too (migration 0022), so that is their release as well. MariaDB forbids a trigger to
change the table that fired it, so its triggers count the steps down (migration 0021) and write
what is to be released to ``caravel_releases``, under the session's connection id (kind
``step``; kind ``rest`` for a cancelled chain step, whose held rest is cancelled with it, from
migration 0022's ``caravel_jobs_release``), and set the session variable ``@caravel_releases``.
After each statement that changes jobs, the store asks for that variable and, when it is set,
makes the releases before anything else runs in the transaction: what a job waits for and its
release still commit together or not at all. A release that changes a job's state (a chain's
rest cancelled) may ask for more; they are made in turn until none is left.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from caravel.limits import HELD_DUE_AT
from caravel.store.plans import Plan, Step, run_plan

__all__ = ["ASKED", "make_releases", "releases_asked", "releases_plan"]

#: Whether the statements run so far asked for releases (as a column a read can carry).
ASKED: sa.Label[Any] = sa.literal_column("@caravel_releases").label("mariadb_releases")
_ASKED = sa.select(ASKED)
_CLEAR = sa.text("SET @caravel_releases = NULL")
# Their columns named, untyped (values as the driver reads them), so that a DB-API connection
# of the caller's reads the rows by name too (see caravel.store.inserts.sessions).
_PENDING = sa.text(
    "SELECT id, kind, job_id, at FROM caravel_releases WHERE conn = CONNECTION_ID() ORDER BY id"
).columns(*(sa.column(name) for name in ("id", "kind", "job_id", "at")))
_DONE = sa.text("DELETE FROM caravel_releases WHERE conn = CONNECTION_ID() AND id <= :last")

_REST_CANCELLED = sa.text(
    "UPDATE caravel_jobs AS j JOIN caravel_jobs AS cancelled ON cancelled.id = :job_id"
    " SET j.state = 'cancelled', j.available_at = NULL, j.lease_expires_at = NULL,"
    " j.finished_at = :at, j.updated_at = :at, j.lease_token = j.lease_token + 1"
    " WHERE j.chain_id = cancelled.chain_id AND j.chain_step > cancelled.chain_step"
    f" AND j.state = 'ready' AND j.due_at = {HELD_DUE_AT}"
)
#: A released step that is a batch's callback: the batch's counts, over its members, once.
_BATCH = sa.text(
    "SELECT b.id, b.total,"
    " COUNT(CASE WHEN m.state = 'completed' THEN 1 END) AS completed,"
    " COUNT(CASE WHEN m.state = 'dead_letter' THEN 1 END) AS dead_letter,"
    " COUNT(CASE WHEN m.state = 'cancelled' THEN 1 END) AS cancelled"
    " FROM caravel_jobs AS j JOIN caravel_batches AS b"
    " ON b.id = j.workflow_id AND b.callback_id = j.id"
    " LEFT JOIN caravel_jobs AS m ON m.batch_id = b.id"
    " WHERE j.id = :job_id GROUP BY b.id, b.total"
).columns(*(sa.column(name) for name in ("id", "total", "completed", "dead_letter", "cancelled")))
#: The workflow steps the trigger found releasable (migration 0021), all those queued up to
#: ``:last`` at once: due after their delay, or after their signal's timeout when only the
#: signal is left; handed their ``hands_result`` dependency's result. One statement for a whole
#: fan-out (a root's finish may queue 10,000; one statement each took 88 s). Joined, not a
#: subquery: MariaDB reads the updated table no other way. A step queued twice is updated once.
_STEP_DUE = "r.at + CASE WHEN s.waiting = 0 THEN COALESCE(s.delay_ms, 0) ELSE s.timeout_ms END"
_QUEUED = "r.conn = CONNECTION_ID() AND r.id <= :last AND r.kind = 'step'"
_WORKFLOW_STEPS = sa.text(
    "UPDATE caravel_releases AS r JOIN caravel_jobs AS j ON j.id = r.job_id"
    " JOIN caravel_workflow_steps AS s ON s.job_id = j.id"
    " LEFT JOIN caravel_workflow_edges AS h ON h.child_id = j.id AND h.hands_result"
    " LEFT JOIN caravel_jobs AS p ON p.id = h.parent_id"
    f" SET j.due_at = {_STEP_DUE}, j.available_at = {_STEP_DUE},"
    " j.updated_at = r.at, s.released_at = r.at,"
    " j.upstream = IF(h.parent_id IS NULL, j.upstream,"
    " CONCAT('{\"result\":', COALESCE(p.result, 'null'),"
    " COALESCE(CONCAT(',', SUBSTR(j.upstream, 2)), '}')))"
    f" WHERE {_QUEUED}"
    f" AND j.state = 'ready' AND j.due_at = {HELD_DUE_AT} AND s.released_at IS NULL"
)
#: Among the steps queued up to ``:last``, the batches' callbacks (primary-key lookups only).
_CALLBACKS = sa.text(
    "SELECT r.job_id, r.at FROM caravel_releases AS r JOIN caravel_jobs AS j ON j.id = r.job_id"
    " JOIN caravel_batches AS b ON b.id = j.workflow_id AND b.callback_id = j.id"
    f" WHERE {_QUEUED}"
).columns(*(sa.column(name) for name in ("job_id", "at")))
#: The callback released in this pass (at ``:at``) is handed the counts.
_CALLBACK = sa.text(
    "UPDATE caravel_jobs AS j JOIN caravel_workflow_steps AS s ON s.job_id = j.id"
    " SET j.upstream = :upstream WHERE j.id = :job_id AND s.released_at = :at"
)


async def releases_asked(conn: AsyncConnection) -> bool:
    """Whether the statements run so far asked for releases not made yet."""
    return bool((await conn.execute(_ASKED)).scalar())


async def make_releases(conn: AsyncConnection) -> None:
    """Make every release asked for in this transaction, and those they ask for in turn."""
    await run_plan(conn.execute, releases_plan())


def releases_plan() -> Plan[None]:
    """:func:`make_releases` as a plan, for a connection the caller owns (a completion in the
    caller's transaction, see :mod:`caravel.store.joined_completion`)."""
    while True:
        yield Step(_CLEAR)
        pending = yield Step(_PENDING)
        if not pending:
            return
        for row in pending:
            if row.kind == "rest":
                yield Step(_REST_CANCELLED, {"job_id": row.job_id, "at": row.at})
        if any(row.kind == "step" for row in pending):
            last = {"last": pending[-1].id}
            yield Step(_WORKFLOW_STEPS, last)  # all of them at once
            for callback in (yield Step(_CALLBACKS, last)):
                yield from _batch_plan({"job_id": callback.job_id, "at": callback.at})
        yield Step(_DONE, {"last": pending[-1].id})


def _batch_plan(params: dict[str, Any]) -> Plan[None]:
    """Hand a batch's callback just released its batch's counts (nothing for any other step)."""
    found = yield Step(_BATCH, params)
    if not found:
        return
    batch = found[0]
    upstream = {
        "batch": {
            "batch_id": str(batch.id),
            "total": batch.total,
            "completed": batch.completed,
            "dead_letter": batch.dead_letter,
            "cancelled": batch.cancelled,
        }
    }
    yield Step(_CALLBACK, {**params, "upstream": json.dumps(upstream)})
