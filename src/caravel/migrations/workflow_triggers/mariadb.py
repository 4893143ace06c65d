"""MariaDB's workflow release (see :mod:`caravel.migrations.workflow_triggers`). A MariaDB
trigger may not change the table that fired it: this one satisfies the edges and counts down the
steps, and queues each step it may release in ``caravel_releases`` (kind ``step``), which the
store releases in the same transaction (:mod:`caravel.store.mariadb.releases`). It is a second
trigger beside 0016's ``caravel_jobs_release``, so a jobs row outside a workflow pays one
``IF``."""

from __future__ import annotations

from caravel.migrations.workflow_triggers import (
    FINISHED,
    REPLAYED,
    SATISFIES,
    TAKEN_BACK,
    releasable,
)

__all__ = ["CREATE", "DROP"]

CREATE = (
    "CREATE TRIGGER IF NOT EXISTS caravel_jobs_workflow_release AFTER UPDATE ON caravel_jobs"
    f" FOR EACH ROW BEGIN IF {FINISHED} THEN"
    # (parent_id, child_id) is the key: a child has at most one edge from NEW.
    " UPDATE caravel_workflow_steps AS c JOIN caravel_workflow_edges AS e"
    " ON e.child_id = c.job_id SET c.waiting = c.waiting - 1"
    f" WHERE e.parent_id = NEW.id AND NOT e.satisfied AND {SATISFIES};"
    " UPDATE caravel_workflow_edges AS e SET e.satisfied = 1"
    f" WHERE e.parent_id = NEW.id AND NOT e.satisfied AND {SATISFIES};"
    " INSERT INTO caravel_releases (conn, kind, job_id, at)"
    " SELECT CONNECTION_ID(), 'step', s.job_id, NEW.updated_at"
    " FROM caravel_workflow_edges AS e JOIN caravel_workflow_steps AS s ON s.job_id = e.child_id"
    f" WHERE e.parent_id = NEW.id AND e.satisfied AND {releasable('s')};"
    " IF ROW_COUNT() > 0 THEN SET @caravel_releases = 1; END IF;"
    f" ELSEIF {REPLAYED} THEN"
    " UPDATE caravel_workflow_steps AS c JOIN caravel_workflow_edges AS e"
    f" ON e.child_id = c.job_id SET c.waiting = c.waiting + 1, e.satisfied = 0 WHERE {TAKEN_BACK};"
    " END IF; END",
)

DROP = ("DROP TRIGGER IF EXISTS caravel_jobs_workflow_release",)
