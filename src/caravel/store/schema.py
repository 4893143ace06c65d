"""The queue's tables, as SQLAlchemy Core metadata: the one schema source.

The Alembic migrations shipped with the package create exactly this; a test runs autogenerate
against a migrated database on every dialect and expects no difference.

Times are whole milliseconds since the Unix epoch (UTC) in BIGINT columns. That keeps comparisons
exact and identical on every database, and matches the rule that queue times are stored to the
millisecond, rounded up.

``available_at`` is the one column the claim query reads: for a ready job it is the due time, for
a running job it is the lease expiry (a crashed worker's job becomes claimable again at that
moment), and for a finished job it is NULL. A partial index over the non-NULL rows keeps the claim
cheap however much finished history the table retains; one over the NULL rows lets the queue
counts bound what they read of that history.
"""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy as sa

from caravel.limits import (
    MAX_ATTEMPTS,
    MAX_CATEGORY_LENGTH,
    MAX_DETAIL_LENGTH,
    MAX_ERROR_CLASS_LENGTH,
    MAX_HOST_LENGTH,
    MAX_KEY_LENGTH,
    MAX_OUTCOME_LENGTH,
    MAX_QUEUE_LIST_LENGTH,
    MAX_QUEUE_NAME_LENGTH,
    MAX_SCHEDULE_NAME_LENGTH,
    MAX_STATE_LENGTH,
    MAX_TAGS_LENGTH,
    MAX_TRACE_CONTEXT_LENGTH,
    MAX_WIRE_NAME_LENGTH,
    MAX_WORKFLOW_NAME_LENGTH,
    PRIORITY_AGING_MS,
)

__all__ = [
    "ATTEMPTS_TABLE",
    "ATTEMPT_OUTCOMES",
    "BATCHES_TABLE",
    "FINISHED_COUNTS_TABLE",
    "JOBS_TABLE",
    "QUEUES_TABLE",
    "QUEUE_LIMITS_TABLE",
    "QUEUE_STARTS_TABLE",
    "QUEUE_WEIGHTS_TABLE",
    "RELEASES_TABLE",
    "SCHEDULES_TABLE",
    "TABLE_NAMES",
    "VERSION_TABLE",
    "WORKERS_TABLE",
    "WORKFLOWS_TABLE",
    "WORKFLOW_EDGES_TABLE",
    "WORKFLOW_SIGNALS_TABLE",
    "WORKFLOW_STEPS_TABLE",
    "attempts",
    "batches",
    "claim_rank",
    "claim_rank_of",
    "include_object",
    "jobs",
    "metadata",
    "partition",
    "queue_limits",
    "queue_starts",
    "queue_weights",
    "queues",
    "schedules",
    "workers",
    "workflow_edges",
    "workflow_signals",
    "workflow_steps",
    "workflows",
]

JOBS_TABLE = "caravel_jobs"
VERSION_TABLE = "caravel_alembic_version"

#: Every table's MetaData; read as :data:`metadata` (below) once it also holds the partial
#: indexes.
_tables = sa.MetaData()

#: The partial indexes, as declared: name, expressions, predicate, unique.
_partial: list[tuple[str, tuple[sa.ColumnElement[Any], ...], str, bool]] = []
_completing = threading.Lock()


def _partial_index(
    name: str, *expressions: sa.ColumnElement[Any], where: str, unique: bool = False
) -> None:
    """Declare an index over the rows matching ``where``: the same predicate on every dialect,
    written once so the two cannot drift apart. It is built with :data:`metadata`: SQLAlchemy
    checks a predicate's dialect options by loading both dialects (PostgreSQL's with every
    driver's module), which the queue's statements never need."""
    _partial.append((name, expressions, where, unique))


jobs = sa.Table(
    JOBS_TABLE,
    _tables,
    sa.Column("id", sa.Uuid(), nullable=False),
    sa.Column("queue", sa.String(MAX_QUEUE_NAME_LENGTH), nullable=False),
    sa.Column("job_type", sa.String(MAX_WIRE_NAME_LENGTH), nullable=False),
    sa.Column("tenant_id", sa.String(MAX_KEY_LENGTH), nullable=False),
    sa.Column("idempotency_key", sa.String(MAX_KEY_LENGTH), nullable=True),
    sa.Column("payload", sa.Text(), nullable=False),
    sa.Column("state", sa.String(MAX_STATE_LENGTH), nullable=False),
    sa.Column("attempt", sa.Integer(), nullable=False),
    sa.Column("max_attempts", sa.Integer(), nullable=False),
    sa.Column("due_at", sa.BigInteger(), nullable=False),
    sa.Column("available_at", sa.BigInteger(), nullable=True),
    sa.Column("lease_token", sa.BigInteger(), nullable=False),
    sa.Column("lease_expires_at", sa.BigInteger(), nullable=True),
    sa.Column("started_at", sa.BigInteger(), nullable=True),
    sa.Column("finished_at", sa.BigInteger(), nullable=True),
    sa.Column("created_at", sa.BigInteger(), nullable=False),
    sa.Column("updated_at", sa.BigInteger(), nullable=False),
    sa.Column("last_failure", sa.String(MAX_CATEGORY_LENGTH), nullable=True),
    sa.Column("trace_context", sa.String(MAX_TRACE_CONTEXT_LENGTH), nullable=True),
    # A completed job's handler result, as JSON (NULL when it returned None).
    sa.Column("result", sa.Text(), nullable=True),
    # The last failed attempt's exception class (never its message).
    sa.Column("error_class", sa.String(MAX_ERROR_CLASS_LENGTH), nullable=True),
    # ",tag1,tag2," or NULL: free-form labels for listings, never payload.
    sa.Column("tags", sa.String(MAX_TAGS_LENGTH), nullable=True),
    # How often the handler snoozed (ran again later without spending an attempt).
    sa.Column("snoozes", sa.Integer(), nullable=False, server_default=sa.text("0")),
    # When an operator asked to cancel the job while it ran; its worker cancels the handler.
    sa.Column("cancel_requested_at", sa.BigInteger(), nullable=True),
    # A pruned job's tombstone: the hash of its type and payload (which are gone), so a repeated
    # submission under its key still returns it and a different one still conflicts.
    sa.Column("content_hash", sa.String(64), nullable=True),
    sa.Column("pruned_at", sa.BigInteger(), nullable=True),
    # Higher is claimed first, aged by waiting time (see :data:`claim_rank`).
    sa.Column("priority", sa.SmallInteger(), nullable=False, server_default=sa.text("0")),
    # "One pending per key": at most one ready (waiting, delayed or retrying) job per queue,
    # tenant and key; unlike the idempotency key it frees up once the job is claimed.
    sa.Column("pending_key", sa.String(MAX_KEY_LENGTH), nullable=True),
    # A chain's steps share the first step's id as ``chain_id``, numbered from 0 by
    # ``chain_step``; ``chain_next`` is the step after this one, held until this one completes.
    sa.Column("chain_id", sa.Uuid(), nullable=True),
    sa.Column("chain_step", sa.Integer(), nullable=True),
    sa.Column("chain_next", sa.Uuid(), nullable=True),
    # The batch this job belongs to (its callback is not a member: the batch row names it).
    sa.Column("batch_id", sa.Uuid(), nullable=True),
    # What the database handed a released job (JSON): ``{"result": ...}``, the previous chain
    # step's result, or ``{"batch": {...}}``, a batch callback's counts.
    sa.Column("upstream", sa.Text(), nullable=True),
    # The job's own execution timeout in ms (``DispatchOptions.timeout``); NULL: its type's.
    sa.Column("timeout_ms", sa.Integer(), nullable=True),
    # The key a per-key concurrency limit counts the job under; NULL means its tenant (the
    # default), read as ``COALESCE(partition_key, tenant_id)`` (:data:`partition`).
    sa.Column("partition_key", sa.String(MAX_KEY_LENGTH), nullable=True),
    # What one start of the job counts for against a rate limit (its type's ``weight``); NULL
    # means 1 (the default), read as ``COALESCE(weight, 1)``.
    sa.Column("weight", sa.Integer(), nullable=True),
    # The worker holding the job's current (or last) lease, set by every claim: the attempt
    # history names it for an attempt whose lease expired with no outcome recorded.
    sa.Column("worker_id", sa.Uuid(), nullable=True),
    # What a running handler reported (JSON ``{"done", "total", "note"}``) and when; kept after
    # the job finishes. Written only under the job's current lease token.
    sa.Column("progress", sa.Text(), nullable=True),
    sa.Column("progress_at", sa.BigInteger(), nullable=True),
    # A JSON object a handler set key by key (``ctx.set_meta``), fenced as progress is.
    sa.Column("meta", sa.Text(), nullable=True),
    # Attempts whose records were deleted to keep the job's history within its bound.
    sa.Column("attempts_dropped", sa.Integer(), nullable=False, server_default=sa.text("0")),
    # A random number each claim draws and every write under its lease presents with the
    # token: a claim lost with an asynchronous primary hands out the same token again on the
    # promoted standby, never the same nonce (see :mod:`caravel.store.claims.nonces`).
    sa.Column("lease_nonce", sa.BigInteger(), nullable=True),
    # The workflow this job is a step of (see :data:`workflows`); NULL for every other job, which
    # the workflow trigger's WHEN clause skips before doing anything.
    sa.Column("workflow_id", sa.Uuid(), nullable=True),
    sa.PrimaryKeyConstraint("id", name="pk_caravel_jobs"),
    sa.CheckConstraint(
        "state IN ('ready', 'running', 'completed', 'dead_letter', 'cancelled', 'pruned')",
        name="ck_caravel_jobs_state",
    ),
    sa.CheckConstraint("attempt >= 0 AND attempt <= max_attempts", name="ck_caravel_jobs_attempt"),
    sa.CheckConstraint(
        f"max_attempts >= 1 AND max_attempts <= {MAX_ATTEMPTS}", name="ck_caravel_jobs_max_attempts"
    ),
)

# Idempotency: one job per key in a queue and tenant. Only keyed jobs have an entry, so a
# keyless job costs this index nothing on insert, claim or acknowledgement.
_partial_index(
    "uq_caravel_jobs_idempotency",
    jobs.c.queue,
    jobs.c.tenant_id,
    jobs.c.idempotency_key,
    unique=True,
    where="idempotency_key IS NOT NULL",
)
_partial_index(
    "ix_caravel_jobs_claim", jobs.c.queue, jobs.c.available_at, where="available_at IS NOT NULL"
)
# Running jobs by lease expiry: where workers look for a crashed worker's jobs.
_partial_index(
    "ix_caravel_jobs_leases", jobs.c.queue, jobs.c.available_at, where="state = 'running'"
)
# The one pending job per queue, tenant and pending key; only ready rows with a key have an
# entry, so it costs other jobs nothing.
_partial_index(
    "uq_caravel_jobs_pending",
    jobs.c.queue,
    jobs.c.tenant_id,
    jobs.c.pending_key,
    unique=True,
    where="pending_key IS NOT NULL AND state = 'ready'",
)
_partial_index(
    "ix_caravel_jobs_chain", jobs.c.chain_id, jobs.c.chain_step, where="chain_id IS NOT NULL"
)
_partial_index("ix_caravel_jobs_batch", jobs.c.batch_id, jobs.c.state, where="batch_id IS NOT NULL")
# A workflow's steps by state: its counts are one GROUP BY over its stretch of this index, and
# pruning finds its jobs here. Only workflow jobs have an entry.
_partial_index(
    "ix_caravel_jobs_workflow", jobs.c.workflow_id, jobs.c.state, where="workflow_id IS NOT NULL"
)
# Finished jobs by queue, state and finish time: queue counts read at most a bounded stretch of
# it, never the finished rows themselves (see queries.counts); the autoscaling signal reads the
# jobs a queue finished lately as a range of it (see scaling.signal_statement).
_partial_index(
    "ix_caravel_jobs_finished",
    jobs.c.queue,
    jobs.c.state,
    jobs.c.finished_at,
    where="available_at IS NULL",
)
# Every job by queue and creation time: a listing (the dashboard's, ``caravel jobs list``, the
# inspector's) reads one page of a queue's stretch, newest or oldest first, instead of sorting
# the whole table, its filters checked along the way; a listing of every queue merges a page per
# queue, the queues found by skipping through it (see queries.job_list).
sa.Index("ix_caravel_jobs_created", jobs.c.queue, jobs.c.created_at, jobs.c.id)
# Dead letters by creation time: the dead-letter listings read a page of it, however many jobs
# completed since the last one. Only a job that dead-letters gets an entry.
_partial_index("ix_caravel_jobs_dead", jobs.c.created_at, jobs.c.id, where="state = 'dead_letter'")


#: The order ready jobs are claimed in: the due time moved earlier by the job's priority, each
#: point worth ``PRIORITY_AGING_MS`` of waiting. The aging step is written into the SQL text (not
#: bound) so that the claim's ORDER BY is the very expression ``ix_caravel_jobs_ranked`` holds.
claim_rank = jobs.c.due_at - jobs.c.priority * sa.literal_column(str(PRIORITY_AGING_MS))


def claim_rank_of(due_at: int, priority: int) -> int:
    """:data:`claim_rank` of one job, in Python (the memory store's order, a batch's order)."""
    return due_at - priority * PRIORITY_AGING_MS


_partial_index("ix_caravel_jobs_ranked", jobs.c.queue, claim_rank, where="state = 'ready'")


#: A job's partition key as per-key concurrency limits count it: its own, else its tenant.
partition = sa.func.coalesce(jobs.c.partition_key, jobs.c.tenant_id)

#: Ready jobs by queue, partition key and claim order: a fair claim finds the keys with due work
#: by skipping through it, and reads at most a batch of each key's jobs in claim order.
_partial_index("ix_caravel_jobs_fair", jobs.c.queue, partition, claim_rank, where="state = 'ready'")


def include_object(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    """Alembic filter: only Caravel's own tables and their indexes and constraints, so an
    application's tables in the same database are never compared or touched."""
    if type_ == "table":
        return name in _tables.tables
    table = getattr(obj, "table", None)
    return table is None or getattr(table, "name", None) in _tables.tables


WORKERS_TABLE = "caravel_workers"

#: MariaDB only: the releases its trigger on the jobs table asks the store to make in the same
#: transaction (migration 0016, :mod:`caravel.store.mariadb.releases`). Not part of
#: :data:`metadata`: the other databases release in their triggers.
RELEASES_TABLE = "caravel_releases"

#: SQLite only: finished jobs per queue and state, kept by triggers on the jobs table in the
#: same transaction as every change (migration 0005), since SQLite has no statistics to estimate
#: a large count from. Not part of :data:`metadata`: PostgreSQL estimates instead.
FINISHED_COUNTS_TABLE = "caravel_finished_counts"

#: One row per worker process: what it serves and when it last said it was alive. A worker
#: whose heartbeat is older than a few intervals is shown as lost.
workers = sa.Table(
    WORKERS_TABLE,
    _tables,
    sa.Column("id", sa.Uuid(), nullable=False),
    sa.Column("host", sa.String(MAX_HOST_LENGTH), nullable=False),
    sa.Column("pid", sa.Integer(), nullable=False),
    sa.Column("queues", sa.String(MAX_QUEUE_LIST_LENGTH), nullable=False),
    sa.Column("concurrency", sa.Integer(), nullable=False),
    sa.Column("started_at", sa.BigInteger(), nullable=False),
    sa.Column("heartbeat_at", sa.BigInteger(), nullable=False),
    sa.Column("in_flight", sa.Integer(), nullable=False),
    sa.Column("stopped_at", sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint("id", name="pk_caravel_workers"),
    sa.Index("ix_caravel_workers_heartbeat", "heartbeat_at"),
)

QUEUES_TABLE = "caravel_queues"

#: One row per queue an operator has paused (or paused and resumed): workers on every host skip
#: a queue while its ``paused_at`` is set. A queue without a row is running.
queues = sa.Table(
    QUEUES_TABLE,
    _tables,
    sa.Column("queue", sa.String(MAX_QUEUE_NAME_LENGTH), nullable=False),
    sa.Column("paused_at", sa.BigInteger(), nullable=True),
    sa.Column("updated_at", sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint("queue", name="pk_caravel_queues"),
)

QUEUE_LIMITS_TABLE = "caravel_queue_limits"

#: One row per queue with a concurrency limit, fair dispatch or a rate limit: at most
#: ``concurrency`` of its jobs run at once, and at most ``per_key`` per partition key; with
#: ``fair``, its ready jobs are claimed round-robin across partition keys; starts weighing at most
#: ``rate`` in any window of ``rate_period_ms``, and at most ``rate_per_key`` per key (``NULL``:
#: no such cap). A queue without a row has no limit, and its claims are exactly those of a queue
#: before limits existed. Limited claims of one queue serialize on its row (see
#: :mod:`caravel.store.limited`).
queue_limits = sa.Table(
    QUEUE_LIMITS_TABLE,
    _tables,
    sa.Column("queue", sa.String(MAX_QUEUE_NAME_LENGTH), nullable=False),
    sa.Column("concurrency", sa.Integer(), nullable=True),
    sa.Column("per_key", sa.Integer(), nullable=True),
    sa.Column("updated_at", sa.BigInteger(), nullable=False),
    sa.Column("rate", sa.Integer(), nullable=True),
    sa.Column("rate_per_key", sa.Integer(), nullable=True),
    sa.Column("rate_period_ms", sa.Integer(), nullable=True),
    sa.Column("fair", sa.Boolean(), nullable=False, server_default=sa.false()),
    # The partition key a fair queue's last claim served last (caravel.store.claims.claim_fair).
    sa.Column("fair_cursor", sa.String(MAX_KEY_LENGTH), nullable=True),
    sa.PrimaryKeyConstraint("queue", name="pk_caravel_queue_limits"),
    sa.CheckConstraint(
        "(concurrency IS NULL OR concurrency >= 1) AND (per_key IS NULL OR per_key >= 1)"
        " AND (rate IS NULL OR rate >= 1) AND (rate_per_key IS NULL OR rate_per_key >= 1)"
        " AND ((rate IS NULL AND rate_per_key IS NULL) = (rate_period_ms IS NULL))"
        " AND (concurrency IS NOT NULL OR per_key IS NOT NULL OR rate_period_ms IS NOT NULL"
        " OR fair)",
        name="ck_caravel_queue_limits_positive",
    ),
)

QUEUE_STARTS_TABLE = "caravel_queue_starts"

#: One row per claim and partition key (:data:`partition`) of a rate-limited queue's starts: when
#: (the claim's ``now``), under which key, and the weight the claim started under it. A limited
#: claim sums the weights of its queue's rows later than ``now - rate_period_ms`` and prunes the
#: older ones; a queue without a rate writes none.
queue_starts = sa.Table(
    QUEUE_STARTS_TABLE,
    _tables,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
    sa.Column("queue", sa.String(MAX_QUEUE_NAME_LENGTH), nullable=False),
    sa.Column("key", sa.String(MAX_KEY_LENGTH), nullable=False),
    sa.Column("started_at", sa.BigInteger(), nullable=False),
    sa.Column("weight", sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint("id", name="pk_caravel_queue_starts"),
)
sa.Index("ix_caravel_queue_starts_window", queue_starts.c.queue, queue_starts.c.started_at)

ATTEMPTS_TABLE = "caravel_attempts"

#: Outcomes an attempt record can hold (``outcome``).
ATTEMPT_OUTCOMES = (
    "completed",
    "failed",
    "snoozed",
    "cancelled",
    "timed_out",
    "lease_expired",
    "discarded",
    "abandoned",
)

#: One row per attempt (claim) of a job, written with its outcome in the same transaction (an
#: attempt whose lease expired, by the claim that took the job over): who ran it, when, how it
#: ended, and only what a handler marked safe to keep (``detail``), never a payload or an
#: exception's message. Keyed by the lease token, which every claim of a job changes (a snooze
#: gives its attempt number back, a replay resets it; the token only grows). Deleted with its job.
attempts = sa.Table(
    ATTEMPTS_TABLE,
    _tables,
    sa.Column("job_id", sa.Uuid(), nullable=False),
    sa.Column("lease_token", sa.BigInteger(), nullable=False),
    sa.Column("attempt", sa.Integer(), nullable=False),
    sa.Column("worker_id", sa.Uuid(), nullable=True),
    sa.Column("host", sa.String(MAX_HOST_LENGTH), nullable=True),
    sa.Column("pid", sa.Integer(), nullable=True),
    sa.Column("claimed_at", sa.BigInteger(), nullable=True),
    sa.Column("finished_at", sa.BigInteger(), nullable=True),
    sa.Column("outcome", sa.String(MAX_OUTCOME_LENGTH), nullable=False),
    sa.Column("category", sa.String(MAX_CATEGORY_LENGTH), nullable=True),
    sa.Column("error_class", sa.String(MAX_ERROR_CLASS_LENGTH), nullable=True),
    sa.Column("detail", sa.String(MAX_DETAIL_LENGTH), nullable=True),
    sa.Column("retry_at", sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint("job_id", "lease_token", name="pk_caravel_attempts"),
    sa.CheckConstraint(
        "outcome IN (" + ", ".join(f"'{o}'" for o in ATTEMPT_OUTCOMES) + ")",
        name="ck_caravel_attempts_outcome",
    ),
)

QUEUE_WEIGHTS_TABLE = "caravel_queue_weights"

#: A fair queue's weighted partition keys: a claim round takes ``weight`` jobs of ``key`` to one
#: of a key without a row. Written with the queue's limits row, removed with it.
queue_weights = sa.Table(
    QUEUE_WEIGHTS_TABLE,
    _tables,
    sa.Column("queue", sa.String(MAX_QUEUE_NAME_LENGTH), nullable=False),
    sa.Column("key", sa.String(MAX_KEY_LENGTH), nullable=False),
    sa.Column("weight", sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint("queue", "key", name="pk_caravel_queue_weights"),
    sa.CheckConstraint("weight >= 1", name="ck_caravel_queue_weights_positive"),
)

SCHEDULES_TABLE = "caravel_schedules"

#: One row per schedule that a scheduler handled a slot of, or that an operator paused. The
#: row only saves work: a slot's job is settled by its idempotency key, not by this table.
schedules = sa.Table(
    SCHEDULES_TABLE,
    _tables,
    sa.Column("name", sa.String(MAX_SCHEDULE_NAME_LENGTH), nullable=False),
    sa.Column("last_slot_at", sa.BigInteger(), nullable=True),
    sa.Column("paused_at", sa.BigInteger(), nullable=True),
    sa.Column("updated_at", sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint("name", name="pk_caravel_schedules"),
)

BATCHES_TABLE = "caravel_batches"

#: One row per batch: how many jobs it has and how many of them finished in each end state,
#: kept by a trigger on the jobs table in the transaction of every finish (and of a replay,
#: which takes one back), and the callback job it releases when the last one finishes.
batches = sa.Table(
    BATCHES_TABLE,
    _tables,
    sa.Column("id", sa.Uuid(), nullable=False),
    sa.Column("tenant_id", sa.String(MAX_KEY_LENGTH), nullable=False),
    sa.Column("total", sa.Integer(), nullable=False),
    sa.Column("completed", sa.Integer(), nullable=False, server_default=sa.text("0")),
    sa.Column("dead_letter", sa.Integer(), nullable=False, server_default=sa.text("0")),
    sa.Column("cancelled", sa.Integer(), nullable=False, server_default=sa.text("0")),
    sa.Column("callback_id", sa.Uuid(), nullable=True),
    sa.Column("created_at", sa.BigInteger(), nullable=False),
    # When every job had finished the first time (the callback's release); a replay after it
    # moves the counts but never releases the callback again.
    sa.Column("finished_at", sa.BigInteger(), nullable=True),
    sa.Column("updated_at", sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint("id", name="pk_caravel_batches"),
    sa.Index("ix_caravel_batches_created", "created_at"),
)

WORKFLOWS_TABLE = "caravel_workflows"

#: One row per workflow (a graph of jobs, see :mod:`caravel.store.workflows`). Workflows span
#: queues, so their idempotency key is unique per tenant, not per queue. No counts here: every
#: step's finish would queue on this one row; reads count the steps from the jobs' workflow
#: index, and a workflow has finished once none of its steps is live.
workflows = sa.Table(
    WORKFLOWS_TABLE,
    _tables,
    sa.Column("id", sa.Uuid(), nullable=False),
    sa.Column("tenant_id", sa.String(MAX_KEY_LENGTH), nullable=False),
    sa.Column("name", sa.String(MAX_WORKFLOW_NAME_LENGTH), nullable=True),
    sa.Column("idempotency_key", sa.String(MAX_KEY_LENGTH), nullable=True),
    # SHA-256 (hex) of the canonical graph: the same key with another graph is a conflict.
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("total", sa.Integer(), nullable=False),
    sa.Column("created_at", sa.BigInteger(), nullable=False),
    sa.Column("cancelled_at", sa.BigInteger(), nullable=True),
    sa.Column("updated_at", sa.BigInteger(), nullable=False),
    # A pruned workflow's tombstone: its steps are gone, its row keeps its key and hash, so a
    # repeated submission under the key still returns it and another graph still conflicts.
    sa.Column("pruned_at", sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint("id", name="pk_caravel_workflows"),
    sa.Index("ix_caravel_workflows_created", "created_at"),
)
_partial_index(
    "uq_caravel_workflows_idempotency",
    workflows.c.tenant_id,
    workflows.c.idempotency_key,
    unique=True,
    where="idempotency_key IS NOT NULL",
)

WORKFLOW_STEPS_TABLE = "caravel_workflow_steps"

#: One row per step of a workflow: what it still waits for (``waiting``: its unsatisfied edges,
#: plus one while its signal is awaited), its waits and when it was released. The count lives
#: here, not on the jobs row, so a fan-in's 10,000 finishes rewrite this narrow row, never the
#: job's.
workflow_steps = sa.Table(
    WORKFLOW_STEPS_TABLE,
    _tables,
    sa.Column("job_id", sa.Uuid(), nullable=False),
    sa.Column("workflow_id", sa.Uuid(), nullable=False),
    sa.Column("step", sa.String(MAX_WORKFLOW_NAME_LENGTH), nullable=False),
    sa.Column("step_index", sa.Integer(), nullable=True),
    sa.Column("waiting", sa.Integer(), nullable=False),
    sa.Column("on_failure", sa.String(8), nullable=False),
    sa.Column("wait_signal", sa.String(MAX_WORKFLOW_NAME_LENGTH), nullable=True),
    sa.Column("signal_received_at", sa.BigInteger(), nullable=True),
    sa.Column("delay_ms", sa.BigInteger(), nullable=True),
    sa.Column("timeout_ms", sa.BigInteger(), nullable=True),
    sa.Column("released_at", sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint("job_id", name="pk_caravel_workflow_steps"),
    sa.Index("ix_caravel_workflow_steps_step", "workflow_id", "step", "step_index"),
)

WORKFLOW_EDGES_TABLE = "caravel_workflow_edges"

#: One row per dependency: ``child_id`` runs after ``parent_id``. The finishing parent's edges are
#: found by the key's prefix; a step's own dependencies by ``ix_caravel_workflow_edges_child``.
workflow_edges = sa.Table(
    WORKFLOW_EDGES_TABLE,
    _tables,
    sa.Column("parent_id", sa.Uuid(), nullable=False),
    sa.Column("child_id", sa.Uuid(), nullable=False),
    sa.Column("workflow_id", sa.Uuid(), nullable=False),
    # The child's ``on_failure`` is ``continue``: a dead-lettered or cancelled parent satisfies it.
    sa.Column("runs_after_failure", sa.Boolean(), nullable=False),
    # The child is handed the parent's result on release (chains).
    sa.Column("hands_result", sa.Boolean(), nullable=False),
    sa.Column("satisfied", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.PrimaryKeyConstraint("parent_id", "child_id", name="pk_caravel_workflow_edges"),
    sa.Index("ix_caravel_workflow_edges_child", "child_id"),
)

WORKFLOW_SIGNALS_TABLE = "caravel_workflow_signals"

#: The signals a workflow received, one per name: the first one counts, a repeat changes
#: nothing. The payload (JSON) is what a waiting step reads.
workflow_signals = sa.Table(
    WORKFLOW_SIGNALS_TABLE,
    _tables,
    sa.Column("workflow_id", sa.Uuid(), nullable=False),
    sa.Column("name", sa.String(MAX_WORKFLOW_NAME_LENGTH), nullable=False),
    sa.Column("payload", sa.Text(), nullable=False),
    sa.Column("received_at", sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint("workflow_id", "name", name="pk_caravel_workflow_signals"),
)


#: The queue's tables as migrations create them, indexes and all (what Alembic compares and
#: ``create_all`` creates), built on its first read by the module's ``__getattr__``. Only
#: declared here: the queue's statements use the tables alone, so a worker or a producer never
#: builds the partial indexes.
metadata: sa.MetaData

#: The names of the queue's tables (what :func:`include_object` keeps).
TABLE_NAMES = frozenset(_tables.tables)


def _metadata() -> sa.MetaData:
    """Every table with all of its indexes: the partial ones are built on the first read."""
    with _completing:
        while _partial:
            name, expressions, where, unique = _partial.pop(0)
            # Built over the table's columns, the index attaches itself to that table.
            sa.Index(
                name,
                *expressions,
                unique=unique,
                postgresql_where=sa.text(where),
                sqlite_where=sa.text(where),
            )
    return _tables


def __getattr__(name: str) -> sa.MetaData:
    """:data:`metadata`, complete."""
    if name == "metadata":
        return _metadata()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
