"""SQLite's workflow release (see :mod:`caravel.migrations.workflow_triggers`): one trigger of
four statements. SQLite has one writer at a time, so no finish can interleave with another.
The step rows a release marks (``released_at`` = the finish's time) name the jobs the last
statement releases; a step released before at the same millisecond is no longer held."""

from __future__ import annotations

from caravel.migrations.workflow_triggers import (
    FINISHED,
    HELD,
    REPLAYED,
    SATISFIES,
    SATISFIES_EDGE,
    batch_outcome,
    due_after,
    releasable,
    with_result,
)

__all__ = ["CREATE", "DROP"]

_STEPS = "caravel_workflow_steps"
_NEWLY = "SELECT e.child_id FROM caravel_workflow_edges AS e WHERE e.parent_id = NEW.id"
_DUE = (
    f"NEW.updated_at + (SELECT {due_after('s')} FROM {_STEPS} AS s"
    " WHERE s.job_id = caravel_jobs.id)"
)

CREATE = (
    "CREATE TRIGGER caravel_jobs_workflow_release AFTER UPDATE OF state ON caravel_jobs"
    f" WHEN {FINISHED} BEGIN"
    # (parent_id, child_id) is the key: a child has at most one edge from NEW.
    f" UPDATE {_STEPS} SET waiting = waiting - 1"
    f" WHERE job_id IN ({_NEWLY} AND NOT e.satisfied AND {SATISFIES});"
    " UPDATE caravel_workflow_edges SET satisfied = 1"
    f" WHERE parent_id = NEW.id AND NOT satisfied AND {SATISFIES_EDGE};"
    f" UPDATE {_STEPS} SET released_at = NEW.updated_at"
    f" WHERE job_id IN ({_NEWLY} AND e.satisfied) AND {releasable(_STEPS)}"
    f" AND EXISTS (SELECT 1 FROM caravel_jobs WHERE id = {_STEPS}.job_id AND {HELD});"
    f" UPDATE caravel_jobs SET due_at = {_DUE}, available_at = {_DUE},"
    " updated_at = NEW.updated_at, upstream = COALESCE("
    f"{batch_outcome('json_object', 'caravel_jobs')},"
    f" {with_result('{0} || {1}', 'caravel_jobs')})"
    f" WHERE id IN ({_NEWLY} AND e.satisfied) AND {HELD}"
    f" AND EXISTS (SELECT 1 FROM {_STEPS} AS s"
    " WHERE s.job_id = caravel_jobs.id AND s.released_at = NEW.updated_at);"
    " END",
    # A replay: the steps first (they read which edges were satisfied), then the edges.
    "CREATE TRIGGER caravel_jobs_workflow_replay AFTER UPDATE OF state ON caravel_jobs"
    f" WHEN {REPLAYED} BEGIN"
    f" UPDATE {_STEPS} SET waiting = waiting + 1 WHERE released_at IS NULL AND job_id IN"
    " (SELECT e.child_id FROM caravel_workflow_edges AS e"
    " WHERE e.parent_id = NEW.id AND e.satisfied AND e.runs_after_failure);"
    " UPDATE caravel_workflow_edges SET satisfied = 0"
    " WHERE parent_id = NEW.id AND satisfied AND runs_after_failure"
    f" AND child_id IN (SELECT job_id FROM {_STEPS} WHERE released_at IS NULL);"
    " END",
)

DROP = (
    "DROP TRIGGER IF EXISTS caravel_jobs_workflow_release",
    "DROP TRIGGER IF EXISTS caravel_jobs_workflow_replay",
)
