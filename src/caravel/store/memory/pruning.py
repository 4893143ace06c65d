"""A prune of the in-memory store: which finished rows a batch removes, in the SQL batch's
order (:mod:`caravel.store.pruning.plan`), and what it does to each: deleted, or, for a job that
held an idempotency key, made a tombstone that keeps the key."""

from __future__ import annotations

from uuid import UUID

from caravel.jobs import JobState
from caravel.retention import content_hash
from caravel.store.memory.tables import JobRow, Tables
from caravel.store.pruning import PruneBatch, PruneRequest

__all__ = ["prune"]

PRUNED = JobState.PRUNED.value


def prune(tables: Tables, request: PruneRequest) -> PruneBatch:
    """One prune batch of ``request`` over ``tables`` (the caller holds their lock)."""
    picked = _prunable(tables, request)
    if request.dry_run:
        expired = sum(1 for row, _ in picked if row.state == PRUNED)
        keyed = sum(1 for row, _ in picked if row.state != PRUNED and row.key is not None)
        return PruneBatch(len(picked) - expired - keyed, keyed, expired)
    deleted = tombstoned = expired = 0
    for row, _ in picked[: request.limit]:
        if row.state == PRUNED or row.key is None:
            expired += row.state == PRUNED
            deleted += row.state != PRUNED
            tables.remove(row)
            if row.workflow_id is not None:
                tables.workflows.step_pruned(row.id, row.workflow_id, request.now)
            continue
        _compact(row, request.now)
        if row.workflow_id is not None:  # a chain's step or a batch's member
            tables.workflows.step_pruned(row.id, row.workflow_id, request.now)
        tables.attempts.pop(row.id, None)  # pruned with the job
        tables.track(row)  # as every change of state (the release triggers' view)
        tombstoned += 1
    return PruneBatch(deleted, tombstoned, expired)


def _prunable(tables: Tables, request: PruneRequest) -> list[tuple[JobRow, int]]:
    """The finished rows a prune at ``request.now`` removes, in the SQL batch's order: queue by
    queue, each end state's old rows, then the queue's expired tombstones."""
    cutoffs = {state.value: cutoff for state, cutoff in request.cutoffs()}
    if request.tombstones_before is not None:
        cutoffs[PRUNED] = request.tombstones_before
    order = {state: n for n, state in enumerate(cutoffs)}
    found = []
    for row in tables.jobs.values():
        cutoff = cutoffs.get(row.state)
        if cutoff is None or row.available_at is not None or tables.kept_for_chain(row):
            continue
        if request.queue is not None and row.queue != request.queue:
            continue
        when = row.pruned_at if row.state == PRUNED else row.finished_at
        if when is not None and when < cutoff:
            found.append((row, order[row.state]))
    found = _whole_workflows(tables, found)
    found.sort(key=lambda pair: (pair[0].queue, pair[1], pair[0].rowid))
    if request.tombstones_before is not None:
        tables.workflows.expire_tombstones(request.tombstones_before)
    return found


def _whole_workflows(tables: Tables, found: list[tuple[JobRow, int]]) -> list[tuple[JobRow, int]]:
    """``found`` without the steps of a workflow any of whose steps is not prunable too: a
    workflow is pruned whole, never while a step is live or young."""
    picked = {row.id for row, _ in found}
    kept: dict[UUID, bool] = {}
    flows = tables.workflows.workflows

    def whole(workflow_id: UUID) -> bool:
        if workflow_id not in kept:
            steps = flows[workflow_id].steps if workflow_id in flows else []
            kept[workflow_id] = all(s in picked or s not in tables.jobs for s in steps)
        return kept[workflow_id]

    def taken(row: JobRow) -> bool:  # one by one: no workflow's, or a chain's or batch's job
        if row.workflow_id is None or row.chain_id is not None or row.batch_id is not None:
            return True
        return whole(row.workflow_id)

    return [pair for pair in found if taken(pair[0])]


def _compact(row: JobRow, now: int) -> None:
    """A keyed finished job made a tombstone, as ``pruning._tombstone`` updates its row."""
    row.content_hash = content_hash(row.job_type, row.payload)
    row.state = PRUNED
    row.payload = ""
    row.pruned_at = row.updated_at = now
    row.result = row.tags = row.trace_context = row.last_failure = row.error_class = None
    row.upstream = None
    row.cancel_requested_at = None
    row.progress = row.progress_at = row.meta = None
