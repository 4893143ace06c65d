"""The statements every SQL dialect shares, in portable SQLAlchemy Core: built from plain
parameters, with the dialect's choices (how claimed rows are picked and locked, how held leases
are matched) passed in. :class:`~caravel.store.base.SqlStore` runs them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from caravel.jobs import JobState
from caravel.limits import HELD_DUE_AT
from caravel.retention import content_hash
from caravel.store.protocol import (
    FailedAttempt,
    JobFilter,
    JobRef,
    NewJob,
    ShownState,
    ThroughputQuery,
)
from caravel.store.rows import STATUS_COLUMNS
from caravel.store.schema import VERSION_TABLE, attempts, jobs

__all__ = [
    "FINISHED_EXACT_LIMIT",
    "MERGED_QUEUES_LIMIT",
    "attempt_history",
    "complete",
    "counts",
    "existing_by_id",
    "existing_by_key",
    "fail",
    "finished_count",
    "finished_queue_names",
    "finished_queues",
    "job_list",
    "listed_by_queue",
    "listed_queue_names",
    "owned",
    "payload",
    "renew",
    "replay",
    "same_content",
    "schema_revision",
    "set_progress",
    "status",
    "throughput",
]

RUNNING = JobState.RUNNING.value
READY = JobState.READY.value
DEAD = JobState.DEAD_LETTER.value
COMPLETED = JobState.COMPLETED.value
CANCELLED = JobState.CANCELLED.value

#: The columns that tell whether a skipped job is a repeat or a conflict.
_IDENTITY = (
    jobs.c.id,
    jobs.c.queue,
    jobs.c.tenant_id,
    jobs.c.idempotency_key,
    jobs.c.job_type,
    jobs.c.payload,
    jobs.c.state,
    jobs.c.content_hash,
)


def _count(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
    return sa.func.coalesce(sa.func.sum(sa.case((condition, 1), else_=0)), 0)


def owned(ref: JobRef) -> sa.ColumnElement[bool]:
    """The one job with this id, in this queue, of this exact tenant."""
    return sa.and_(
        jobs.c.id == ref.job_id, jobs.c.queue == ref.queue, jobs.c.tenant_id == ref.tenant_id
    )


# ----- inserts -------------------------------------------------------------------------------


def existing_by_key(keys: Sequence[tuple[str, str, str | None]]) -> sa.Select[Any]:
    """The rows holding these (queue, tenant, idempotency key) triples."""
    condition = sa.tuple_(jobs.c.queue, jobs.c.tenant_id, jobs.c.idempotency_key).in_(keys)
    return sa.select(*_IDENTITY).where(condition)


def existing_by_id(ids: Sequence[Any]) -> sa.Select[Any]:
    """The rows holding these ids."""
    return sa.select(*_IDENTITY).where(jobs.c.id.in_(ids))


def same_content(row: Any, job: NewJob) -> bool:
    """Whether ``row`` holds what ``job`` would have stored (a repeat, not a conflict); a
    tombstone (a pruned job) by the hash of the type and payload it kept instead of them."""
    same = (row.queue, row.tenant_id) == (job.queue, job.tenant_id)
    if row.state == JobState.PRUNED.value:
        return same and row.content_hash == content_hash(job.job_type, job.payload)
    return same and (row.job_type, row.payload) == (job.job_type, job.payload)


# ----- claims and acknowledgements -----------------------------------------------------------


def complete(held: sa.ColumnElement[bool], result: Any = None) -> sa.Update:
    """Mark the rows ``held`` matches completed at ``b_now``; returns their ids. ``result``,
    when given, is the expression for each row's stored result (a bound value or a column of
    the dialect's batch)."""
    values: dict[str, Any] = {
        "state": COMPLETED,
        "available_at": None,
        "lease_expires_at": None,
        "finished_at": sa.bindparam("b_now"),
        "updated_at": sa.bindparam("b_now"),
    }
    if result is not None:
        values["result"] = result
    return sa.update(jobs).where(held).values(values).returning(jobs.c.id)


def fail(
    held: sa.ColumnElement[bool], failure: FailedAttempt, now: int, key: Any = jobs.c.pending_key
) -> sa.Update:
    """Record one failed attempt on the row ``held`` matches: ready again at ``retry_at`` (its
    pending key then ``key``), or a dead letter when there is none. Returns its id."""
    retry_at = failure.retry_at
    return (
        sa.update(jobs)
        .where(held)
        .values(
            state=READY if retry_at is not None else DEAD,
            due_at=retry_at if retry_at is not None else jobs.c.due_at,
            available_at=retry_at,
            lease_expires_at=None,
            finished_at=None if retry_at is not None else now,
            last_failure=failure.category,
            error_class=failure.error_class or jobs.c.error_class,  # none given: kept
            updated_at=now,
            pending_key=key if retry_at is not None else jobs.c.pending_key,
        )
        .returning(jobs.c.id)
    )


def renew(held: sa.ColumnElement[bool], now: int, expires_at: int) -> sa.Update:
    """Extend the unexpired lease ``held`` matches; returns its new expiry."""
    return (
        sa.update(jobs)
        .where(held, jobs.c.lease_expires_at > now)
        .values(lease_expires_at=expires_at, available_at=expires_at, updated_at=now)
        .returning(jobs.c.lease_expires_at)
    )


def set_progress(held: sa.ColumnElement[bool], *, progress: bool, meta: bool) -> sa.Update:
    """Store a running handler's report on the row ``held`` matches: its progress (bound as
    ``b_progress``, stamped ``b_now``) and its metadata (``b_meta``), each only when asked;
    returns its id. The job's ``updated_at`` stays: a report is not a change of state."""
    values: dict[str, Any] = {}
    if progress:
        values["progress"] = sa.bindparam("b_progress", type_=sa.Text())
        values["progress_at"] = sa.bindparam("b_now", type_=sa.BigInteger())
    if meta:
        values["meta"] = sa.bindparam("b_meta", type_=sa.Text())
    return sa.update(jobs).where(held).values(values).returning(jobs.c.id)


# ----- status, replay and listings -----------------------------------------------------------


def status(ref: JobRef) -> sa.Select[Any]:
    return sa.select(*STATUS_COLUMNS, jobs.c.result).where(owned(ref))


def attempt_history(ref: JobRef) -> sa.Select[Any]:
    """The job ``ref`` names (column ``job``) with its attempt records, oldest claim first: one
    row without a record when it has none, no row when there is no such job."""
    return (
        sa.select(jobs.c.id.label("job"), *attempts.c)
        .select_from(jobs.outerjoin(attempts, attempts.c.job_id == jobs.c.id))
        .where(owned(ref))
        .order_by(attempts.c.lease_token)
    )


def payload(ref: JobRef) -> sa.Select[Any]:
    return sa.select(jobs.c.payload).where(owned(ref), jobs.c.state != JobState.PRUNED.value)


def replay(ref: JobRef, now: int, key: Any = jobs.c.pending_key) -> sa.Update:
    """A dead letter of this queue and tenant made ready again: attempts reset, due now, its
    pending key ``key``."""
    return (
        sa.update(jobs)
        .where(owned(ref), jobs.c.state == DEAD)
        .values(
            state=READY,
            attempt=0,
            due_at=now,
            available_at=now,
            lease_expires_at=None,
            started_at=None,
            finished_at=None,
            last_failure=None,
            error_class=None,
            snoozes=0,
            updated_at=now,
            pending_key=key,
        )
        .returning(jobs.c.id)
    )


def _shown(state: ShownState, now: int) -> sa.ColumnElement[bool]:
    """The rows in ``state`` at ``now``, split exactly as :func:`counts` splits them."""
    if state in ("ready", "delayed", "held"):
        due_at = jobs.c.due_at
        due = {
            "ready": due_at <= now,
            "delayed": sa.and_(due_at > now, due_at < HELD_DUE_AT),
            "held": due_at >= HELD_DUE_AT,
        }[state]
        return sa.and_(jobs.c.state == READY, due)
    if state in ("running", "expired"):
        lease = jobs.c.lease_expires_at
        return sa.and_(jobs.c.state == RUNNING, lease > now if state == "running" else lease <= now)
    return _state_is({"dead_letter": DEAD, "cancelled": CANCELLED}.get(state, COMPLETED))


def _state_is(state: str) -> sa.ColumnElement[bool]:
    """``state = '<state>'`` with the state written into the statement, not bound: only then
    can the planner (PostgreSQL's generic plan, SQLite's) use an index whose predicate names
    that state, such as ``ix_caravel_jobs_dead``. The states are the schema's own words."""
    return jobs.c.state == sa.literal_column(f"'{JobState(state).value}'", jobs.c.state.type)


#: Past this many queues an unfiltered listing is one statement over the whole table (sorted),
#: not a merge of per-queue pages: a statement of that many parts costs more to plan than it saves.
MERGED_QUEUES_LIMIT = 100


def listed_by_queue(where: JobFilter) -> bool:
    """Whether :func:`job_list` needs the queue names (:func:`listed_queue_names`): a listing of
    no one queue that ``ix_caravel_jobs_dead`` does not serve merges one page per queue of
    ``ix_caravel_jobs_created`` (queue, created_at, id)."""
    dead = where.state == JobState.DEAD_LETTER or where.shown == "dead_letter"
    return where.queue is None and not dead


def listed_queue_names() -> sa.Select[Any]:
    """Every queue holding a job, in order, found by skipping through ``ix_caravel_jobs_created``
    (queue first): one probe per queue, never a read of the jobs themselves."""

    def next_queue(after: sa.ColumnElement[Any] | None) -> sa.ScalarSelect[Any]:
        found = sa.select(jobs.c.queue)
        if after is not None:
            found = found.where(jobs.c.queue > after)
        return found.order_by(jobs.c.queue).limit(1).scalar_subquery()

    seen = sa.select(next_queue(None).label("queue")).cte("listed", recursive=True)
    seen = seen.union_all(sa.select(next_queue(seen.c.queue)).where(seen.c.queue.is_not(None)))
    return sa.select(seen.c.queue).where(seen.c.queue.is_not(None))


def job_list(where: JobFilter, queues: Sequence[str] | None = None) -> sa.Select[Any]:
    """One page of the jobs ``where`` matches, newest (or oldest) first.

    With ``queues`` (every queue holding a job, from :func:`listed_queue_names`, when
    :func:`listed_by_queue` says the listing needs them) the page is merged from each queue's
    first ``limit + offset`` matches, each a stretch of ``ix_caravel_jobs_created``, so a queue
    with few jobs behind millions of another's is read as quickly as a busy one. Without, the
    listing is one queue's (its stretch of that index) or the dead letters' (a page of
    ``ix_caravel_jobs_dead``)."""
    conditions: list[sa.ColumnElement[bool]] = []
    if where.queue is not None:
        conditions.append(jobs.c.queue == where.queue)
    if where.tenant_id is not None:
        conditions.append(jobs.c.tenant_id == where.tenant_id)
    if where.state is not None:
        conditions.append(_state_is(where.state.value))
    if where.job_type is not None:
        conditions.append(jobs.c.job_type == where.job_type)
    if where.shown is not None:
        conditions.append(_shown(where.shown, where.now))
    if where.tag is not None:
        # LIKE '%,tag,%' with '_' escaped: the stored ",a,b," matches whole tags only.
        conditions.append(jobs.c.tags.contains(f",{where.tag},", autoescape=True))
    if where.batch_id is not None:
        conditions.append(jobs.c.batch_id == where.batch_id)
    matching = sa.select(*STATUS_COLUMNS).where(*conditions)
    if queues is None or len(queues) > MERGED_QUEUES_LIMIT:
        return _page(matching, where, matching.selected_columns)
    # Each part is a subquery of its own: a compound member's ORDER BY and LIMIT are its own
    # only inside one (SQLite, MariaDB).
    reach = where.limit + where.offset
    parts = []
    for queue in queues:
        one = matching.where(jobs.c.queue == queue)
        part = _order(one, where, one.selected_columns).limit(reach).subquery()
        parts.append(sa.select(*part.c))
    if not parts:  # no job at all: a page that finds nothing, without reading the table
        return _page(matching.where(sa.false()), where, matching.selected_columns)
    merged = sa.union_all(*parts).subquery("listed") if len(parts) > 1 else parts[0].subquery()
    return _page(sa.select(*merged.c), where, merged.c)


def _order(stmt: sa.Select[Any], where: JobFilter, columns: Any) -> sa.Select[Any]:
    if where.oldest_first:
        return stmt.order_by(columns.created_at.asc(), columns.id.asc())
    return stmt.order_by(columns.created_at.desc(), columns.id.desc())


def _page(stmt: sa.Select[Any], where: JobFilter, columns: Any) -> sa.Select[Any]:
    return _order(stmt, where, columns).limit(where.limit).offset(where.offset)


#: Finished jobs (completed, dead letters) are counted exactly up to this many per queue and
#: state; past it the dialect estimates (``SqlStore._finished_estimate``), so a count never
#: reads more of the retained history than this.
FINISHED_EXACT_LIMIT = 10_000


def finished_queues(queue: sa.ColumnElement[Any] | None) -> sa.CTE:
    """The queues that have finished jobs (only ``queue`` when given), found by skipping through
    the finished index: one probe per queue, never a read of the finished rows themselves. A
    recursive CTE of one column ``queue``, whose last row is NULL."""
    finished_rows = jobs.c.available_at.is_(None)

    def next_finished_queue(after: sa.ColumnElement[Any] | None) -> sa.ScalarSelect[Any]:
        found = sa.select(jobs.c.queue).where(finished_rows)
        if after is not None:
            found = found.where(jobs.c.queue > after)
        if queue is not None:
            found = found.where(jobs.c.queue == queue)
        # Ordered as the finished index is (queue, state): read in that order it stops at its
        # first entry, where a scan of the table would have to sort what it found.
        return found.order_by(jobs.c.queue, jobs.c.state).limit(1).scalar_subquery()

    seen = sa.select(next_finished_queue(None).label("queue")).cte("finished", recursive=True)
    return seen.union_all(
        sa.select(next_finished_queue(seen.c.queue)).where(seen.c.queue.is_not(None))
    )


def counts(one_queue: bool, kept: sa.TableClause | None = None) -> sa.Select[Any]:
    """Per queue (or for the queue bound as ``b_queue`` when ``one_queue``): ready, delayed,
    held, running, expired, dead_letter, completed and the oldest due time of a ready job, at
    ``b_now``. Built once per store and reused (building it costs more than running it).

    Live jobs are counted from the rows the partial claim index holds (``available_at IS NOT
    NULL``), finished ones from the partial index over finished rows, each at most
    :data:`FINISHED_EXACT_LIMIT` (NULL when there are more), so the statement never reads the
    finished history beyond that. Queues with finished jobs are found by skipping through that
    index, one probe per queue. Where the dialect keeps exact finished counts per queue and
    state in a table (``kept``, columns ``queue``, ``state``, ``jobs``), they are read from it
    instead: one row each, where the bounded stretch is up to that many index entries."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    queue = sa.bindparam("b_queue", type_=jobs.c.queue.type) if one_queue else None
    live_rows = jobs.c.available_at.is_not(None)
    finished_rows = jobs.c.available_at.is_(None)
    ready = jobs.c.state == READY
    running = jobs.c.state == RUNNING
    due = sa.and_(ready, jobs.c.due_at <= now)
    held = sa.literal(HELD_DUE_AT, sa.BigInteger())
    live = sa.select(
        jobs.c.queue,
        _count(due).label("ready"),
        _count(sa.and_(ready, jobs.c.due_at > now, jobs.c.due_at < held)).label("delayed"),
        _count(sa.and_(ready, jobs.c.due_at >= held)).label("held"),
        _count(sa.and_(running, jobs.c.lease_expires_at > now)).label("running"),
        _count(sa.and_(running, jobs.c.lease_expires_at <= now)).label("expired"),
        sa.func.min(sa.case((due, jobs.c.due_at))).label("oldest"),
    ).where(live_rows)
    if queue is not None:
        live = live.where(jobs.c.queue == queue)
    live_cte = live.group_by(jobs.c.queue).cte("live")

    seen = finished_queues(queue)
    names = sa.union(
        sa.select(live_cte.c.queue),
        sa.select(seen.c.queue).where(seen.c.queue.is_not(None)),
    ).subquery("names")

    def capped(state: str) -> sa.ColumnElement[Any]:
        if kept is not None:
            # No row: no job of the queue has finished in that state.
            found = sa.select(kept.c.jobs).where(kept.c.queue == names.c.queue)
            return sa.func.coalesce(found.where(kept.c.state == state).scalar_subquery(), 0)
        where = (jobs.c.queue == names.c.queue, jobs.c.state == state, finished_rows)
        beyond = sa.select(sa.literal(1)).where(*where).offset(FINISHED_EXACT_LIMIT).limit(1)
        exact = sa.select(sa.func.count()).select_from(jobs).where(*where).scalar_subquery()
        return sa.case((beyond.exists(), sa.null()), else_=exact)

    def live_count(name: str) -> sa.ColumnElement[int]:
        return sa.func.coalesce(live_cte.c[name], 0)

    return (
        sa.select(
            names.c.queue,
            live_count("ready").label("ready"),
            live_count("delayed").label("delayed"),
            live_count("held").label("held"),
            live_count("running").label("running"),
            live_count("expired").label("expired"),
            capped(DEAD).label("dead_letter"),
            capped(COMPLETED).label("completed"),
            capped(CANCELLED).label("cancelled"),
            live_cte.c.oldest,
        )
        .select_from(names.outerjoin(live_cte, live_cte.c.queue == names.c.queue))
        .order_by(names.c.queue)
    )


def finished_count(queue: str, state: str) -> sa.Select[Any]:
    """The exact number of finished jobs of ``queue`` in ``state`` (read from the partial index
    over finished rows alone)."""
    return (
        sa.select(sa.func.count())
        .select_from(jobs)
        .where(jobs.c.queue == queue, jobs.c.state == state, jobs.c.available_at.is_(None))
    )


def finished_queue_names() -> sa.Select[Any]:
    """The queues that have finished jobs, found by skipping through the finished index."""
    names = finished_queues(None)
    return sa.select(names.c.queue).where(names.c.queue.is_not(None))


def throughput(query: ThroughputQuery, queues: Sequence[str]) -> sa.Select[Any]:
    """Finished jobs of ``queues`` per queue and bucket (only buckets with a job), ordered.

    Each queue's jobs finished within the window are a range of the finished index (queue,
    state, finish time), one per queue and state: the queues are named (the caller finds them
    with :func:`finished_queue_names`), so the statement reads the window's entries and never
    the rest of the retained history. Joined to a query of the names instead, PostgreSQL may
    read the whole index once rather than probe it per queue."""
    finished = jobs.c.finished_at
    conditions = [
        jobs.c.queue.in_(queues),
        jobs.c.state.in_((COMPLETED, DEAD)),
        jobs.c.available_at.is_(None),
        finished >= query.since,
        finished < query.until,
    ]
    # Integer division on both databases (finished_at - since is never negative here).
    bucket = ((finished - query.since) // query.bucket_ms).label("bucket")
    inner = sa.select(jobs.c.queue, jobs.c.state, bucket).where(*conditions).subquery()
    return (
        sa.select(
            inner.c.queue,
            inner.c.bucket,
            _count(inner.c.state == COMPLETED).label("completed"),
            _count(inner.c.state == DEAD).label("dead_lettered"),
        )
        .group_by(inner.c.queue, inner.c.bucket)
        .order_by(inner.c.queue, inner.c.bucket)
    )


# ----- the schema ---------------------------------------------------------------------------


def schema_revision() -> sa.Select[Any]:
    version = sa.table(VERSION_TABLE, sa.column("version_num", sa.String()))
    return sa.select(version.c.version_num)
