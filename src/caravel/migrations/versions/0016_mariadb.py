"""MariaDB: the whole schema of revision 0015, in MariaDB's terms. Nothing on PostgreSQL and
SQLite.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06

MariaDB has neither partial nor expression indexes. Where the other databases index a
predicate or an expression, the jobs table has a virtual generated column holding the indexed
value (``NULL`` where the row is outside the predicate, which a unique index never compares):

* ``pending_ready``: the pending key of a ready job, so ``uq_caravel_jobs_pending`` holds one
  pending job per queue, tenant and key, as the partial unique index does elsewhere;
* ``claim_rank``: the due time moved earlier by the priority
  (:data:`caravel.store.schema.claim_rank`), so ready jobs are read in claim order from an index;
* ``partition_key_or_tenant``: the key per-key limits and fair dispatch count by.

Jobs also get ``seq``, numbered as they are inserted: the claim index holds it after the rank,
so jobs of equal rank are claimed in the order they were enqueued (the order PostgreSQL's and
SQLite's tables keep them in), not in the order of their random ids.

Text is ``utf8mb4`` under the binary ``utf8mb4_nopad_bin`` collation, so keys compare as the
other databases compare them (case and trailing spaces matter); the texts that may hold a
payload or a result are ``MEDIUMTEXT`` (``TEXT`` stops at 64 KiB). Ids are MariaDB's own
``UUID`` type (16 bytes).

The release triggers of 0009 cannot exist here: a MariaDB trigger may not change the table that
fired it. The batch counts are kept by a trigger on the jobs table; releasing a chain's next
step or a batch's callback is done by the store in the transaction of the change
(:mod:`caravel.store.mariadb.releases`), from what that trigger writes to
``caravel_releases``.

MariaDB commits DDL as it goes: a failed upgrade can stop half way. Every statement here creates
its object only if it is not there yet, so ``caravel db upgrade`` run again finishes it.
"""

from __future__ import annotations

from alembic import op

from caravel.migrations.losses import LossKind

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_COUNT = "SELECT count(*) FROM "

#: What this downgrade deletes, on MariaDB only (:mod:`caravel.migrations.dialects`): it drops
#: every table of the queue, so every row of each kind the other databases count on their way
#: to base is counted here, in one step.
LOSSES = (
    LossKind("all_jobs", "job", "jobs", "deleted", ("caravel_jobs",), _COUNT + "caravel_jobs"),
    LossKind(
        "all_workers",
        "worker",
        "workers",
        "deleted",
        ("caravel_workers",),
        _COUNT + "caravel_workers",
    ),
    LossKind(
        "all_paused_queues",
        "paused queue",
        "paused queues",
        "resumed",
        ("caravel_queues",),
        _COUNT + "caravel_queues WHERE paused_at IS NOT NULL",
    ),
    LossKind(
        "all_schedules",
        "schedule's state",
        "schedules' states",
        "deleted",
        ("caravel_schedules",),
        _COUNT + "caravel_schedules",
    ),
    LossKind(
        "all_queue_limits",
        "queue's limits",
        "queues' limits",
        "deleted",
        ("caravel_queue_limits",),
        _COUNT + "caravel_queue_limits",
    ),
    LossKind(
        "all_batches",
        "batch",
        "batches",
        "deleted",
        ("caravel_batches",),
        _COUNT + "caravel_batches",
    ),
    LossKind(
        "all_attempt_records",
        "attempt record",
        "attempt records",
        "deleted",
        ("caravel_attempts",),
        _COUNT + "caravel_attempts",
    ),
)

_TABLE = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin"
#: A job held back by its chain or batch: ready, due at the end of time (``HELD_DUE_AT``).
_HELD_DUE_AT = 253_402_300_799_000
_PRIORITY_AGING_MS = 6_000

CREATE = (
    "CREATE TABLE IF NOT EXISTS caravel_jobs ("
    " id UUID NOT NULL,"
    " queue VARCHAR(64) NOT NULL,"
    " job_type VARCHAR(128) NOT NULL,"
    " tenant_id VARCHAR(128) NOT NULL,"
    " idempotency_key VARCHAR(128) NULL,"
    " payload MEDIUMTEXT NOT NULL,"
    " state VARCHAR(16) NOT NULL,"
    " attempt INT NOT NULL,"
    " max_attempts INT NOT NULL,"
    " due_at BIGINT NOT NULL,"
    " available_at BIGINT NULL,"
    " lease_token BIGINT NOT NULL,"
    " lease_expires_at BIGINT NULL,"
    " started_at BIGINT NULL,"
    " finished_at BIGINT NULL,"
    " created_at BIGINT NOT NULL,"
    " updated_at BIGINT NOT NULL,"
    " last_failure VARCHAR(32) NULL,"
    " trace_context VARCHAR(512) NULL,"
    " result MEDIUMTEXT NULL,"
    " error_class VARCHAR(200) NULL,"
    " tags VARCHAR(1041) NULL,"
    " snoozes INT NOT NULL DEFAULT 0,"
    " cancel_requested_at BIGINT NULL,"
    " content_hash VARCHAR(64) NULL,"
    " pruned_at BIGINT NULL,"
    " priority SMALLINT NOT NULL DEFAULT 0,"
    " pending_key VARCHAR(128) NULL,"
    " chain_id UUID NULL,"
    " chain_step INT NULL,"
    " chain_next UUID NULL,"
    " batch_id UUID NULL,"
    " upstream MEDIUMTEXT NULL,"
    " timeout_ms INT NULL,"
    " partition_key VARCHAR(128) NULL,"
    " weight INT NULL,"
    " worker_id UUID NULL,"
    " progress MEDIUMTEXT NULL,"
    " progress_at BIGINT NULL,"
    " meta MEDIUMTEXT NULL,"
    " attempts_dropped INT NOT NULL DEFAULT 0,"
    " seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
    " pending_ready VARCHAR(128) AS (IF(state = 'ready', pending_key, NULL)) VIRTUAL,"
    f" claim_rank BIGINT AS (due_at - priority * {_PRIORITY_AGING_MS}) VIRTUAL,"
    " partition_key_or_tenant VARCHAR(128) AS (COALESCE(partition_key, tenant_id)) VIRTUAL,"
    " CONSTRAINT pk_caravel_jobs PRIMARY KEY (id),"
    " CONSTRAINT ck_caravel_jobs_state CHECK (state IN"
    " ('ready', 'running', 'completed', 'dead_letter', 'cancelled', 'pruned')),"
    " CONSTRAINT ck_caravel_jobs_attempt CHECK (attempt >= 0 AND attempt <= max_attempts),"
    " CONSTRAINT ck_caravel_jobs_max_attempts CHECK (max_attempts >= 1 AND max_attempts <= 100),"
    " UNIQUE INDEX uq_caravel_jobs_seq (seq),"
    " UNIQUE INDEX uq_caravel_jobs_idempotency (queue, tenant_id, idempotency_key),"
    " UNIQUE INDEX uq_caravel_jobs_pending (queue, tenant_id, pending_ready),"
    " INDEX ix_caravel_jobs_claim (queue, available_at),"
    " INDEX ix_caravel_jobs_leases (queue, state, available_at),"
    " INDEX ix_caravel_jobs_ranked (queue, state, claim_rank, seq),"
    " INDEX ix_caravel_jobs_fair (queue, state, partition_key_or_tenant, claim_rank, seq),"
    " INDEX ix_caravel_jobs_chain (chain_id, chain_step),"
    " INDEX ix_caravel_jobs_batch (batch_id, state),"
    " INDEX ix_caravel_jobs_finished (queue, state, available_at)"
    ")" + _TABLE,
    "CREATE TABLE IF NOT EXISTS caravel_workers ("
    " id UUID NOT NULL,"
    " host VARCHAR(255) NOT NULL,"
    " pid INT NOT NULL,"
    " queues VARCHAR(1024) NOT NULL,"
    " concurrency INT NOT NULL,"
    " started_at BIGINT NOT NULL,"
    " heartbeat_at BIGINT NOT NULL,"
    " in_flight INT NOT NULL,"
    " stopped_at BIGINT NULL,"
    " CONSTRAINT pk_caravel_workers PRIMARY KEY (id),"
    " INDEX ix_caravel_workers_heartbeat (heartbeat_at)"
    ")" + _TABLE,
    "CREATE TABLE IF NOT EXISTS caravel_queues ("
    " queue VARCHAR(64) NOT NULL,"
    " paused_at BIGINT NULL,"
    " updated_at BIGINT NOT NULL,"
    " CONSTRAINT pk_caravel_queues PRIMARY KEY (queue)"
    ")" + _TABLE,
    "CREATE TABLE IF NOT EXISTS caravel_schedules ("
    " name VARCHAR(64) NOT NULL,"
    " last_slot_at BIGINT NULL,"
    " paused_at BIGINT NULL,"
    " updated_at BIGINT NOT NULL,"
    " CONSTRAINT pk_caravel_schedules PRIMARY KEY (name)"
    ")" + _TABLE,
    "CREATE TABLE IF NOT EXISTS caravel_batches ("
    " id UUID NOT NULL,"
    " tenant_id VARCHAR(128) NOT NULL,"
    " total INT NOT NULL,"
    " completed INT NOT NULL DEFAULT 0,"
    " dead_letter INT NOT NULL DEFAULT 0,"
    " cancelled INT NOT NULL DEFAULT 0,"
    " callback_id UUID NULL,"
    " created_at BIGINT NOT NULL,"
    " finished_at BIGINT NULL,"
    " updated_at BIGINT NOT NULL,"
    " CONSTRAINT pk_caravel_batches PRIMARY KEY (id),"
    " INDEX ix_caravel_batches_created (created_at)"
    ")" + _TABLE,
    "CREATE TABLE IF NOT EXISTS caravel_queue_limits ("
    " queue VARCHAR(64) NOT NULL,"
    " concurrency INT NULL,"
    " per_key INT NULL,"
    " updated_at BIGINT NOT NULL,"
    " rate INT NULL,"
    " rate_per_key INT NULL,"
    " rate_period_ms INT NULL,"
    " fair BOOLEAN NOT NULL DEFAULT 0,"
    " fair_cursor VARCHAR(128) NULL,"
    " CONSTRAINT pk_caravel_queue_limits PRIMARY KEY (queue),"
    " CONSTRAINT ck_caravel_queue_limits_positive CHECK ("
    "(concurrency IS NULL OR concurrency >= 1) AND (per_key IS NULL OR per_key >= 1)"
    " AND (rate IS NULL OR rate >= 1) AND (rate_per_key IS NULL OR rate_per_key >= 1)"
    " AND ((rate IS NULL AND rate_per_key IS NULL) = (rate_period_ms IS NULL))"
    " AND (concurrency IS NOT NULL OR per_key IS NOT NULL OR rate_period_ms IS NOT NULL"
    " OR fair))"
    ")" + _TABLE,
    "CREATE TABLE IF NOT EXISTS caravel_queue_starts ("
    " id BIGINT NOT NULL AUTO_INCREMENT,"
    " queue VARCHAR(64) NOT NULL,"
    " `key` VARCHAR(128) NOT NULL,"
    " started_at BIGINT NOT NULL,"
    " weight INT NOT NULL,"
    " CONSTRAINT pk_caravel_queue_starts PRIMARY KEY (id),"
    " INDEX ix_caravel_queue_starts_window (queue, started_at)"
    ")" + _TABLE,
    "CREATE TABLE IF NOT EXISTS caravel_queue_weights ("
    " queue VARCHAR(64) NOT NULL,"
    " `key` VARCHAR(128) NOT NULL,"
    " weight INT NOT NULL,"
    " CONSTRAINT pk_caravel_queue_weights PRIMARY KEY (queue, `key`),"
    " CONSTRAINT ck_caravel_queue_weights_positive CHECK (weight >= 1)"
    ")" + _TABLE,
    "CREATE TABLE IF NOT EXISTS caravel_attempts ("
    " job_id UUID NOT NULL,"
    " lease_token BIGINT NOT NULL,"
    " attempt INT NOT NULL,"
    " worker_id UUID NULL,"
    " host VARCHAR(255) NULL,"
    " pid INT NULL,"
    " claimed_at BIGINT NULL,"
    " finished_at BIGINT NULL,"
    " outcome VARCHAR(16) NOT NULL,"
    " category VARCHAR(32) NULL,"
    " error_class VARCHAR(200) NULL,"
    " detail VARCHAR(500) NULL,"
    " retry_at BIGINT NULL,"
    " CONSTRAINT pk_caravel_attempts PRIMARY KEY (job_id, lease_token),"
    " CONSTRAINT ck_caravel_attempts_outcome CHECK (outcome IN ('completed', 'failed',"
    " 'snoozed', 'cancelled', 'timed_out', 'lease_expired', 'discarded', 'abandoned'))"
    ")" + _TABLE,
    # What the release trigger asks the store to do in the same transaction: release a
    # chain's next step, cancel a chain's held rest, release a batch's callback. Rows are the
    # writing session's (conn) and gone by its commit.
    "CREATE TABLE IF NOT EXISTS caravel_releases ("
    " id BIGINT NOT NULL AUTO_INCREMENT,"
    " conn BIGINT UNSIGNED NOT NULL,"
    " kind VARCHAR(8) NOT NULL,"
    " job_id UUID NOT NULL,"
    " at BIGINT NOT NULL,"
    " CONSTRAINT pk_caravel_releases PRIMARY KEY (id),"
    " INDEX ix_caravel_releases_conn (conn, id)"
    ")" + _TABLE,
    "CREATE TRIGGER IF NOT EXISTS caravel_jobs_release AFTER UPDATE ON caravel_jobs"
    " FOR EACH ROW BEGIN"
    " IF NEW.chain_next IS NOT NULL AND NEW.state = 'completed' AND OLD.state <> 'completed'"
    " THEN INSERT INTO caravel_releases (conn, kind, job_id, at)"
    " VALUES (CONNECTION_ID(), 'next', NEW.id, NEW.updated_at); SET @caravel_releases = 1;"
    " END IF;"
    " IF NEW.chain_next IS NOT NULL AND NEW.state = 'cancelled' AND OLD.state <> 'cancelled'"
    " THEN INSERT INTO caravel_releases (conn, kind, job_id, at)"
    " VALUES (CONNECTION_ID(), 'rest', NEW.id, NEW.updated_at); SET @caravel_releases = 1;"
    " END IF;"
    " IF NEW.batch_id IS NOT NULL AND OLD.state <> NEW.state AND NEW.state <> 'pruned' AND"
    " (NEW.state IN ('completed', 'dead_letter', 'cancelled')"
    " OR OLD.state IN ('completed', 'dead_letter', 'cancelled')) THEN"
    " UPDATE caravel_batches SET"
    " completed = completed + (NEW.state = 'completed') - (OLD.state = 'completed'),"
    " dead_letter = dead_letter + (NEW.state = 'dead_letter') - (OLD.state = 'dead_letter'),"
    " cancelled = cancelled + (NEW.state = 'cancelled') - (OLD.state = 'cancelled'),"
    " updated_at = NEW.updated_at WHERE id = NEW.batch_id;"
    " IF EXISTS (SELECT 1 FROM caravel_batches WHERE id = NEW.batch_id"
    " AND finished_at IS NULL AND completed + dead_letter + cancelled = total) THEN"
    " UPDATE caravel_batches SET finished_at = NEW.updated_at WHERE id = NEW.batch_id;"
    " INSERT INTO caravel_releases (conn, kind, job_id, at)"
    " VALUES (CONNECTION_ID(), 'batch', NEW.batch_id, NEW.updated_at);"
    " SET @caravel_releases = 1;"
    " END IF;"
    " END IF;"
    " END",
)

DROP = (
    "DROP TRIGGER IF EXISTS caravel_jobs_release",
    "DROP TABLE IF EXISTS caravel_releases",
    "DROP TABLE IF EXISTS caravel_attempts",
    "DROP TABLE IF EXISTS caravel_queue_weights",
    "DROP TABLE IF EXISTS caravel_queue_starts",
    "DROP TABLE IF EXISTS caravel_queue_limits",
    "DROP TABLE IF EXISTS caravel_batches",
    "DROP TABLE IF EXISTS caravel_schedules",
    "DROP TABLE IF EXISTS caravel_queues",
    "DROP TABLE IF EXISTS caravel_workers",
    "DROP TABLE IF EXISTS caravel_jobs",
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "mariadb":
        return
    for statement in CREATE:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != "mariadb":
        return
    for statement in DROP:
        op.execute(statement)
