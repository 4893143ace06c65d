"""The triggers that released held jobs from migration 0009 to 0021, per dialect: a chain's next
step when its step completes, and a batch's callback when its last job finishes; and that cancel
a chain's held steps when a step before them is cancelled. Migration 0022 replaces them with the
``LINKS_*`` triggers below, which keep only what is not a release: a chain's cancelled step
cancels its held rest, and a batch's counts follow its members. The releases are the workflow
triggers' (:mod:`caravel.migrations.workflow_triggers`), since chains and batches are workflows.
The triggers before 0022 stay here for migration 0009 and for 0022's downgrade.

They run inside the statement that changes a job's state, whichever operation that is (an
acknowledgement, a claim that dead-letters an expired lease, a cancel, a replay), so what a job
waits for and its release commit together or not at all. On PostgreSQL the release also sends
the released job's queue its NOTIFY, delivered at that commit. A batch's counts are one row updated
by every member's finish: concurrent finishers queue on its row lock, and exactly one of them
sees the last count and releases the callback, which only a job still held can be (so a replay
after the batch finished never releases it twice).
"""

from __future__ import annotations

from caravel.limits import HELD_DUE_AT
from caravel.store.postgresql.notifications import CHANNEL

__all__ = [
    "LINKS_MARIADB_CREATE",
    "LINKS_MARIADB_DROP",
    "LINKS_POSTGRESQL_CREATE",
    "LINKS_POSTGRESQL_DROP",
    "LINKS_SQLITE_CREATE",
    "LINKS_SQLITE_DROP",
    "POSTGRESQL_CREATE",
    "POSTGRESQL_DROP",
    "SQLITE_CREATE",
    "SQLITE_DROP",
]

_END_STATES = "('completed', 'dead_letter', 'cancelled')"
#: The transitions that change a batch's counts: into or out of an end state (a prune's
#: ``pruned`` keeps the count it had).
_COUNTED = (
    f"OLD.state <> NEW.state AND NEW.state <> 'pruned'"
    f" AND (NEW.state IN {_END_STATES} OR OLD.state IN {_END_STATES})"
)
_CHAINED = "NEW.state = 'completed' AND OLD.state <> 'completed'"
_GIVEN_UP = "NEW.state = 'cancelled' AND OLD.state <> 'cancelled'"
_HELD = f"state = 'ready' AND due_at = {HELD_DUE_AT}"
_RELEASE = "due_at = NEW.updated_at, available_at = NEW.updated_at, updated_at = NEW.updated_at"
_NEXT_STEP = (
    f"UPDATE caravel_jobs SET {_RELEASE},"
    " upstream = '{\"result\":' || COALESCE(NEW.result, 'null') || '}'"
    f" WHERE id = NEW.chain_next AND {_HELD};"
)


#: A cancelled step ends its chain: the steps after it that are still held are cancelled with it
#: (one statement for them all, so no trigger needs to fire itself).
_REST_CANCELLED = (
    "UPDATE caravel_jobs SET state = 'cancelled', available_at = NULL, lease_expires_at = NULL,"
    " finished_at = NEW.updated_at, updated_at = NEW.updated_at, lease_token = lease_token + 1"
    f" WHERE chain_id = NEW.chain_id AND chain_step > NEW.chain_step AND {_HELD};"
)


def _delta(state: str, cast: str) -> str:
    return f"{state} = {state} + (NEW.state = '{state}'){cast} - (OLD.state = '{state}'){cast}"


def _counts(cast: str) -> str:
    parts = ", ".join(_delta(state, cast) for state in ("completed", "dead_letter", "cancelled"))
    return f"UPDATE caravel_batches SET {parts}, updated_at = NEW.updated_at"


POSTGRESQL_CREATE = (
    f"""
CREATE FUNCTION caravel_jobs_release() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    b caravel_batches%ROWTYPE;
    released VARCHAR;
BEGIN
    IF NEW.chain_next IS NOT NULL AND {_CHAINED} THEN
        {_NEXT_STEP[:-1]} RETURNING queue INTO released;
        IF FOUND THEN
            PERFORM pg_notify('{CHANNEL}', released);
        END IF;
    END IF;
    IF NEW.chain_next IS NOT NULL AND {_GIVEN_UP} THEN
        {_REST_CANCELLED}
    END IF;
    IF NEW.batch_id IS NOT NULL AND {_COUNTED} THEN
        {_counts("::int")} WHERE id = NEW.batch_id RETURNING * INTO b;
        IF FOUND AND b.finished_at IS NULL
                AND b.completed + b.dead_letter + b.cancelled = b.total THEN
            UPDATE caravel_batches SET finished_at = NEW.updated_at WHERE id = b.id;
            UPDATE caravel_jobs SET {_RELEASE},
                upstream = json_build_object('batch', json_build_object(
                    'batch_id', b.id, 'total', b.total, 'completed', b.completed,
                    'dead_letter', b.dead_letter, 'cancelled', b.cancelled))::text
            WHERE id = b.callback_id AND {_HELD} RETURNING queue INTO released;
            IF FOUND THEN
                PERFORM pg_notify('{CHANNEL}', released);
            END IF;
        END IF;
    END IF;
    RETURN NULL;
END
$$
""",
    "CREATE TRIGGER caravel_jobs_release AFTER UPDATE OF state ON caravel_jobs FOR EACH ROW"
    f" WHEN ((NEW.chain_next IS NOT NULL AND (({_CHAINED}) OR ({_GIVEN_UP})))"
    f" OR (NEW.batch_id IS NOT NULL AND {_COUNTED}))"
    " EXECUTE FUNCTION caravel_jobs_release()",
)
POSTGRESQL_DROP = (
    "DROP TRIGGER IF EXISTS caravel_jobs_release ON caravel_jobs",
    "DROP FUNCTION IF EXISTS caravel_jobs_release()",
)

_FINISHED_NOW = (
    "finished_at IS NULL AND completed + dead_letter + cancelled = total AND id = NEW.batch_id"
)
SQLITE_CREATE = (
    "CREATE TRIGGER caravel_jobs_chain_release AFTER UPDATE OF state ON caravel_jobs"
    f" WHEN NEW.chain_next IS NOT NULL AND {_CHAINED} BEGIN {_NEXT_STEP} END",
    "CREATE TRIGGER caravel_jobs_chain_cancel AFTER UPDATE OF state ON caravel_jobs"
    f" WHEN NEW.chain_next IS NOT NULL AND {_GIVEN_UP} BEGIN {_REST_CANCELLED} END",
    "CREATE TRIGGER caravel_jobs_batch_release AFTER UPDATE OF state ON caravel_jobs"
    f" WHEN NEW.batch_id IS NOT NULL AND {_COUNTED} BEGIN"
    f" {_counts('')} WHERE id = NEW.batch_id;"
    f" UPDATE caravel_jobs SET {_RELEASE}, upstream = (SELECT json_object('batch', json_object("
    "'batch_id', b.id, 'total', b.total, 'completed', b.completed,"
    " 'dead_letter', b.dead_letter, 'cancelled', b.cancelled))"
    " FROM caravel_batches AS b WHERE b.id = NEW.batch_id)"
    f" WHERE id = (SELECT callback_id FROM caravel_batches WHERE {_FINISHED_NOW}) AND {_HELD};"
    f" UPDATE caravel_batches SET finished_at = NEW.updated_at WHERE {_FINISHED_NOW};"
    " END",
)
SQLITE_DROP = (
    "DROP TRIGGER IF EXISTS caravel_jobs_chain_release",
    "DROP TRIGGER IF EXISTS caravel_jobs_chain_cancel",
    "DROP TRIGGER IF EXISTS caravel_jobs_batch_release",
)

# ----- from migration 0022: no releases, only the chain rule and the batch counts ------------

LINKS_POSTGRESQL_CREATE = (
    f"""
CREATE FUNCTION caravel_jobs_links() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    b caravel_batches%ROWTYPE;
BEGIN
    IF NEW.chain_next IS NOT NULL AND {_GIVEN_UP} THEN
        {_REST_CANCELLED}
    END IF;
    IF NEW.batch_id IS NOT NULL AND {_COUNTED} THEN
        {_counts("::int")} WHERE id = NEW.batch_id RETURNING * INTO b;
        IF FOUND AND b.finished_at IS NULL
                AND b.completed + b.dead_letter + b.cancelled = b.total THEN
            UPDATE caravel_batches SET finished_at = NEW.updated_at WHERE id = b.id;
        END IF;
    END IF;
    RETURN NULL;
END
$$
""",
    "CREATE TRIGGER caravel_jobs_links AFTER UPDATE OF state ON caravel_jobs FOR EACH ROW"
    f" WHEN ((NEW.chain_next IS NOT NULL AND {_GIVEN_UP})"
    f" OR (NEW.batch_id IS NOT NULL AND {_COUNTED}))"
    " EXECUTE FUNCTION caravel_jobs_links()",
)
LINKS_POSTGRESQL_DROP = (
    "DROP TRIGGER IF EXISTS caravel_jobs_links ON caravel_jobs",
    "DROP FUNCTION IF EXISTS caravel_jobs_links()",
)

LINKS_SQLITE_CREATE = (
    SQLITE_CREATE[1],  # the chain's cancel, unchanged
    "CREATE TRIGGER caravel_jobs_batch_count AFTER UPDATE OF state ON caravel_jobs"
    f" WHEN NEW.batch_id IS NOT NULL AND {_COUNTED} BEGIN"
    f" {_counts('')} WHERE id = NEW.batch_id;"
    f" UPDATE caravel_batches SET finished_at = NEW.updated_at WHERE {_FINISHED_NOW};"
    " END",
)
LINKS_SQLITE_DROP = (
    "DROP TRIGGER IF EXISTS caravel_jobs_chain_cancel",
    "DROP TRIGGER IF EXISTS caravel_jobs_batch_count",
)

LINKS_MARIADB_CREATE = (
    "CREATE TRIGGER IF NOT EXISTS caravel_jobs_release AFTER UPDATE ON caravel_jobs"
    " FOR EACH ROW BEGIN"
    f" IF NEW.chain_next IS NOT NULL AND {_GIVEN_UP}"
    " THEN INSERT INTO caravel_releases (conn, kind, job_id, at)"
    " VALUES (CONNECTION_ID(), 'rest', NEW.id, NEW.updated_at); SET @caravel_releases = 1;"
    " END IF;"
    f" IF NEW.batch_id IS NOT NULL AND {_COUNTED} THEN"
    f" {_counts('')} WHERE id = NEW.batch_id;"
    f" UPDATE caravel_batches SET finished_at = NEW.updated_at WHERE {_FINISHED_NOW};"
    " END IF;"
    " END",
)
LINKS_MARIADB_DROP = ("DROP TRIGGER IF EXISTS caravel_jobs_release",)
