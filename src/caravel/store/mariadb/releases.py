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

__all__ = ["ASKED", "make_releases", "releases_asked"]


#: Whether the statements run so far asked for releases (as a column a read can carry).
ASKED: sa.Label[Any] = sa.literal_column("@caravel_releases").label("mariadb_releases")
_ASKED = sa.select(ASKED)
_CLEAR = sa.text("SET @caravel_releases = NULL")
_PENDING = sa.text(
    "SELECT id, kind, job_id, at FROM caravel_releases WHERE conn = CONNECTION_ID() ORDER BY id"
)
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
)
#: A workflow step its trigger found releasable (migration 0021): due after its delay, or after
#: its signal's timeout when only the signal is left; handed its ``hands_result`` dependency's
#: result. Joined, not a subquery: MariaDB reads the updated table no other way.
_STEP_DUE = ":at + CASE WHEN s.waiting = 0 THEN COALESCE(s.delay_ms, 0) ELSE s.timeout_ms END"
_WORKFLOW_STEP = sa.text(
    "UPDATE caravel_jobs AS j JOIN caravel_workflow_steps AS s ON s.job_id = j.id"
    " LEFT JOIN caravel_workflow_edges AS h ON h.child_id = j.id AND h.hands_result"
    " LEFT JOIN caravel_jobs AS p ON p.id = h.parent_id"
    f" SET j.due_at = {_STEP_DUE}, j.available_at = {_STEP_DUE},"
    " j.updated_at = :at, s.released_at = :at,"
    " j.upstream = IF(h.parent_id IS NULL, j.upstream,"
    " CONCAT('{\"result\":', COALESCE(p.result, 'null'),"
    " COALESCE(CONCAT(',', SUBSTR(j.upstream, 2)), '}')))"
    f" WHERE j.id = :job_id AND j.state = 'ready' AND j.due_at = {HELD_DUE_AT}"
    " AND s.released_at IS NULL"
)
_CALLBACK = sa.text("UPDATE caravel_jobs SET upstream = :upstream WHERE id = :job_id")


async def releases_asked(conn: AsyncConnection) -> bool:
    """Whether the statements run so far asked for releases not made yet."""
    return bool((await conn.execute(_ASKED)).scalar())


async def make_releases(conn: AsyncConnection) -> None:
    """Make every release asked for in this transaction, and those they ask for in turn."""
    while True:
        await conn.execute(_CLEAR)
        pending = (await conn.execute(_PENDING)).all()
        if not pending:
            return
        for row in pending:
            params: dict[str, Any] = {"job_id": row.job_id, "at": row.at}
            if row.kind == "rest":
                await conn.execute(_REST_CANCELLED, params)
            elif row.kind == "step":
                released = await conn.execute(_WORKFLOW_STEP, params)
                if released.rowcount:
                    await _hand_batch(conn, params)
        await conn.execute(_DONE, {"last": pending[-1].id})


async def _hand_batch(conn: AsyncConnection, params: dict[str, Any]) -> None:
    """Hand a released batch callback its batch's counts (nothing for any other step)."""
    batch = (await conn.execute(_BATCH, params)).one_or_none()
    if batch is None:
        return
    upstream = {
        "batch": {
            "batch_id": str(batch.id),
            "total": batch.total,
            "completed": batch.completed,
            "dead_letter": batch.dead_letter,
            "cancelled": batch.cancelled,
        }
    }
    await conn.execute(_CALLBACK, {"job_id": params["job_id"], "upstream": json.dumps(upstream)})
