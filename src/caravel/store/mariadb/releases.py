"""Releasing held jobs on MariaDB, in the transaction of the change that releases them.

On the other databases a trigger on the jobs table releases a chain's next step when its step
completes, cancels a chain's held steps when a step before them is cancelled, and releases a
batch's callback when its last job finishes (:mod:`caravel.migrations.release_triggers`).
MariaDB forbids a trigger to change the table that fired it, so its trigger (migration 0016)
keeps the batch counts and writes what is to be released to ``caravel_releases``, under the
session's connection id, and sets the session variable ``@caravel_releases``. After each
statement that changes jobs, the store asks for that variable and, when it is set, makes the
releases before anything else runs in the transaction: what a job waits for and its release
still commit together or not at all. A release that changes a job's state (a chain's rest
cancelled) may ask for more; they are made in turn until none is left. A workflow's trigger
(migration 0021) counts its steps down the same way and queues the steps it may release
(kind ``step``).
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from caravel.limits import HELD_DUE_AT
from caravel.store.plans import Plan, Step, run_plan

__all__ = ["ASKED", "make_releases", "releases_asked", "releases_plan"]

_HELD = f"state = 'ready' AND due_at = {HELD_DUE_AT}"
_RELEASE = "due_at = :at, available_at = :at, updated_at = :at"

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

#: The step after a completed one gets the completed step's result as its upstream.
_NEXT_STEP = sa.text(
    f"UPDATE caravel_jobs AS j JOIN caravel_jobs AS done ON done.id = :job_id"
    f" SET j.due_at = :at, j.available_at = :at, j.updated_at = :at,"
    " j.upstream = CONCAT('{\"result\":', COALESCE(done.result, 'null'), '}')"
    f" WHERE j.id = done.chain_next AND j.state = 'ready' AND j.due_at = {HELD_DUE_AT}"
)
_REST_CANCELLED = sa.text(
    "UPDATE caravel_jobs AS j JOIN caravel_jobs AS cancelled ON cancelled.id = :job_id"
    " SET j.state = 'cancelled', j.available_at = NULL, j.lease_expires_at = NULL,"
    " j.finished_at = :at, j.updated_at = :at, j.lease_token = j.lease_token + 1"
    " WHERE j.chain_id = cancelled.chain_id AND j.chain_step > cancelled.chain_step"
    f" AND j.state = 'ready' AND j.due_at = {HELD_DUE_AT}"
)
_BATCH = sa.text(
    "SELECT id, total, completed, dead_letter, cancelled, callback_id"
    " FROM caravel_batches WHERE id = :job_id"
).columns(
    *(
        sa.column(name)
        for name in ("id", "total", "completed", "dead_letter", "cancelled", "callback_id")
    )
)
#: The workflow steps the trigger found releasable (migration 0021), all those queued up to
#: ``:last`` at once: due after their delay, or after their signal's timeout when only the
#: signal is left; handed their ``hands_result`` dependency's result. One statement for a whole
#: fan-out (a root's finish may queue 10,000; one statement each took 88 s). Joined, not a
#: subquery: MariaDB reads the updated table no other way. A step queued twice is updated once.
_STEP_DUE = "r.at + CASE WHEN s.waiting = 0 THEN COALESCE(s.delay_ms, 0) ELSE s.timeout_ms END"
_WORKFLOW_STEPS = sa.text(
    "UPDATE caravel_releases AS r JOIN caravel_jobs AS j ON j.id = r.job_id"
    " JOIN caravel_workflow_steps AS s ON s.job_id = j.id"
    " LEFT JOIN caravel_workflow_edges AS h ON h.child_id = j.id AND h.hands_result"
    " LEFT JOIN caravel_jobs AS p ON p.id = h.parent_id"
    f" SET j.due_at = {_STEP_DUE}, j.available_at = {_STEP_DUE},"
    " j.updated_at = r.at, s.released_at = r.at,"
    " j.upstream = IF(h.parent_id IS NULL, j.upstream,"
    " CONCAT('{\"result\":', COALESCE(p.result, 'null'), ',', SUBSTR(j.upstream, 2)))"
    " WHERE r.conn = CONNECTION_ID() AND r.id <= :last AND r.kind = 'step'"
    f" AND j.state = 'ready' AND j.due_at = {HELD_DUE_AT} AND s.released_at IS NULL"
)
_CALLBACK = sa.text(
    f"UPDATE caravel_jobs SET {_RELEASE}, upstream = :upstream WHERE id = :callback AND {_HELD}"
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
        steps = False
        for row in pending:
            params: dict[str, Any] = {"job_id": row.job_id, "at": row.at}
            if row.kind == "next":
                yield Step(_NEXT_STEP, params)
            elif row.kind == "rest":
                yield Step(_REST_CANCELLED, params)
            elif row.kind == "step":
                steps = True  # all of them at once, below
            else:
                yield from _callback_plan(params)
        if steps:
            yield Step(_WORKFLOW_STEPS, {"last": pending[-1].id})
        yield Step(_DONE, {"last": pending[-1].id})


def _callback_plan(params: dict[str, Any]) -> Plan[None]:
    found = yield Step(_BATCH, params)
    batch = found[0] if found else None
    if batch is None or batch.callback_id is None:
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
    yield Step(
        _CALLBACK,
        {"at": params["at"], "callback": batch.callback_id, "upstream": json.dumps(upstream)},
    )
