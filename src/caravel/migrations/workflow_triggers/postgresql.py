"""PostgreSQL's workflow release (see :mod:`caravel.migrations.workflow_triggers`): one
PL/pgSQL function. The edges and the step counts change in one statement whose rows the function
walks; each release also sends the released job's queue its NOTIFY, delivered at the commit."""

from __future__ import annotations

from caravel.migrations.workflow_triggers import (
    FINISHED,
    HELD,
    REPLAYED,
    SATISFIES,
    TAKEN_BACK,
    batch_outcome,
    due_after,
    releasable,
    with_result,
)
from caravel.store.postgresql.notifications import CHANNEL

__all__ = ["CREATE", "DROP"]

CREATE = (
    f"""
CREATE FUNCTION caravel_jobs_workflow_release() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s RECORD;
    released VARCHAR;
    due BIGINT;
BEGIN
    IF NEW.state NOT IN ('completed', 'dead_letter', 'cancelled') THEN  -- a replay
        WITH taken AS (
            UPDATE caravel_workflow_steps AS c SET waiting = c.waiting + 1
            FROM caravel_workflow_edges AS e WHERE e.child_id = c.job_id AND {TAKEN_BACK}
            RETURNING c.job_id
        )
        UPDATE caravel_workflow_edges AS e SET satisfied = false
        FROM taken WHERE e.parent_id = NEW.id AND e.child_id = taken.job_id;
        RETURN NULL;
    END IF;
    FOR s IN
        WITH satisfied AS (
            UPDATE caravel_workflow_edges AS e SET satisfied = true
            WHERE e.parent_id = NEW.id AND NOT e.satisfied AND {SATISFIES}
            RETURNING e.child_id
        )
        UPDATE caravel_workflow_steps AS c SET waiting = c.waiting - 1
        FROM satisfied WHERE c.job_id = satisfied.child_id
        RETURNING c.*
    LOOP
        CONTINUE WHEN NOT ({releasable("s")});
        due := NEW.updated_at + {due_after("s")};
        UPDATE caravel_jobs SET due_at = due, available_at = due, updated_at = NEW.updated_at,
            upstream = COALESCE({batch_outcome("json_build_object", "caravel_jobs", "::text")},
                {with_result("{0} || {1}", "caravel_jobs")})
        WHERE id = s.job_id AND {HELD} RETURNING queue INTO released;
        IF FOUND THEN
            UPDATE caravel_workflow_steps SET released_at = NEW.updated_at WHERE job_id = s.job_id;
            PERFORM pg_notify('{CHANNEL}', released);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$
""",
    "CREATE TRIGGER caravel_jobs_workflow_release AFTER UPDATE OF state ON caravel_jobs"
    f" FOR EACH ROW WHEN (({FINISHED}) OR ({REPLAYED}))"
    " EXECUTE FUNCTION caravel_jobs_workflow_release()",
)

DROP = (
    "DROP TRIGGER IF EXISTS caravel_jobs_workflow_release ON caravel_jobs",
    "DROP FUNCTION IF EXISTS caravel_jobs_workflow_release()",
)
