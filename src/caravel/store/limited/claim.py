"""The limited claim of the SQL stores as a plan (:mod:`caravel.store.plans`) each dialect runs
in one write transaction: the queue's limits row read (and locked where the database has
concurrent writers), then the claim its caps, rate and fairness call for (see the package's
docstring)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from caravel.flow.fairness import fair_order, next_cursor
from caravel.flow.window import (
    Candidate,
    Caps,
    fit,
    stale_before,
    started_weights,
    window_clock,
)
from caravel.jobs import JobState
from caravel.store import claims
from caravel.store.claims.takeover import expired_before, taking_over
from caravel.store.limited.rated_reads import (
    DUE,
    RUNNING_BY_KEY,
    STARTED,
    RunningCount,
    rated_reads,
)
from caravel.store.limited.starts import log_starts, prune_starts
from caravel.store.limited.tables import move_cursor, read_limit, read_weights
from caravel.store.plans import Plan, Step
from caravel.store.protocol import ClaimRequest, ClaimSource

__all__ = ["ClaimingStore", "limited_claim"]

RUNNING = JobState.RUNNING.value
_SCAN: Any = sa.literal_column(str(claims.KEY_SCAN))


class ClaimingStore(Protocol):
    """What a limited claim asks of its store: its statement cache and the dialect's pieces of
    a claim."""

    #: How a fair claim reads each key's first jobs (:data:`~caravel.store.claims.KeyJobs`).
    _fair_key_jobs: claims.KeyJobs

    #: A rated claim's ``UPDATE`` made to log its starts too, where the dialect can (``None``:
    #: the claim logs them with a statement of its own).
    _claim_logging_starts: Callable[[sa.Update], sa.Select[Any]] | None

    #: A fair claim's ``UPDATE`` made to move the fair cursor too, where the dialect can
    #: (``None``: the claim moves it with a statement of its own).
    _claim_moving_cursor: Callable[[sa.Update], sa.Select[Any]] | None

    def _statement(self, name: str, build: Callable[[], Any]) -> Any: ...

    def _limit_lock(self, read: sa.Select[Any]) -> sa.Select[Any]: ...

    def _claim_statement(
        self, source: ClaimSource, *, literal_limit: bool = True, unlimited: bool = True
    ) -> Any: ...

    def _claim_target(self, candidates: sa.Select[Any]) -> sa.ColumnElement[bool]: ...


def limited_claim(
    store: ClaimingStore, request: ClaimRequest, params: dict[str, Any]
) -> Plan[list[Any]]:
    """The limited claim (see the module docstring) as a plan, for the dialect to run in
    one write transaction; ``params`` are the plain claim's. Its value: the claimed rows."""
    source = request.source
    lock = store._statement("limit_lock", lambda: store._limit_lock(read_limit()))
    found = yield Step(lock, {"b_queue": request.queue})
    if found and found[0].rate_period_ms is not None:
        return (yield from _rated_claim(store, request, params, found[0]))
    concurrency, per_key = (None, None) if not found else found[0][:2]
    fair = bool(found and found[0].fair)
    limit = request.limit
    if concurrency is not None:
        count = store._statement("running_count", claims.running_count)
        counted = yield Step(count, {"b_queue": params["b_queue"], "b_now": params["b_now"]})
        limit = min(limit, concurrency - int(counted[0][0]))
        if limit <= 0:
            return []
    params = {**params, "b_limit": limit}
    if per_key is not None:
        params["b_per_key"] = per_key
    if fair:
        params["b_cursor"] = found[0].fair_cursor or ""
        keyed, weighted = per_key is not None, bool(found[0].weighted)
        moving = store._claim_moving_cursor

        def fair_claim() -> Any:
            claim = claims.claim_fair(
                source, store._claim_target, store._fair_key_jobs, per_key=keyed, weighted=weighted
            )
            return claim if moving is None else moving(claim)

        stmt = store._statement(f"claim_fair_{source}_{keyed}_{weighted}", fair_claim)
    elif per_key is None:
        stmt = store._statement(
            f"claim_limited_{source}",
            lambda: store._claim_statement(source, unlimited=False),
        )
    else:
        stmt = store._statement(
            f"claim_per_key_{source}", lambda: claims.claim_per_key(source, store._claim_target)
        )
    claimed = yield from _taking_over(store, request, Step(stmt, params))
    if fair and store._claim_moving_cursor is None:
        yield from _move_cursor(store, request.queue, found[0].fair_cursor, claimed)
    return claimed


def _taking_over(store: ClaimingStore, request: ClaimRequest, claim: Step) -> Plan[list[Any]]:
    """Run ``claim``, recording the expired leases it takes over (it reads at most the first
    :data:`~caravel.store.claims.KEY_SCAN` of them, as :func:`expired_before` does)."""
    before = None
    if request.source != "ready":
        read = store._statement("expired_before_scan", lambda: expired_before(_SCAN))
        before = Step(read, {"b_queue": request.queue, "b_now": claim.parameters["b_now"]})
    return (yield from taking_over(claim, before, request.attempt_history))


def _move_cursor(
    store: ClaimingStore, queue: str, cursor: str | None, claimed: Sequence[Any]
) -> Plan[None]:
    """Store the fair cursor a claim leaves (:func:`~caravel.flow.fairness.next_cursor`)
    when it moved."""
    served = (row.partition_key or row.tenant_id for row in claimed if row.state == RUNNING)
    moved = next_cursor(cursor, served)
    if moved != cursor:
        yield Step(
            store._statement("fair_cursor", move_cursor), {"b_queue": queue, "b_cursor": moved}
        )


def _rated_claim(
    store: ClaimingStore, request: ClaimRequest, params: dict[str, Any], stored: Any
) -> Plan[list[Any]]:
    """The limited claim of a queue with a rate (see the module docstring)."""
    queue, period = params["b_queue"], int(stored.rate_period_ms)
    source = request.source
    caps = Caps(stored.concurrency, stored.per_key, stored.rate, stored.rate_per_key)
    own = params["b_now"]
    reads = {
        "b_queue": queue,
        "b_now": own,
        "b_period": period,
        "b_scan": _scan(caps, stored.fair, request.limit),
        "b_fits": min(cap for cap in (caps.rate, caps.rate_per_key) if cap is not None),
    }
    counting: RunningCount = "none"
    if caps.per_key is not None or stored.fair:
        counting = "by_key"
    elif caps.concurrency is not None:
        counting = "total"
    reading = store._statement(
        f"rated_reads_{source}_{counting}", lambda: rated_reads(source, counting)
    )
    rows = yield Step(reading, reads)
    latest_at, oldest_at = (None if at is None else int(at) for at in (rows[0].k, rows[0].n))
    started = {row.key: int(row.n) for row in rows if row.kind == STARTED}
    running = {row.key: int(row.n) for row in rows if row.kind == RUNNING_BY_KEY}
    due = [row for row in rows if row.kind == DUE]
    # Leases are judged by the claim's own clock (another host's logged starts may run ahead
    # of it); the window counts to, and the claim's starts and lease run from, the window clock.
    now = window_clock(own, latest_at)
    params = {**params, "b_now": now, "b_expires": params["b_expires"] + now - own}
    stale = stale_before(latest_at, period, oldest_at)
    if stale is not None:
        prune = store._statement("starts_prune", prune_starts)
        yield Step(prune, {"b_queue": queue, "b_since": stale})
    if stored.fair:
        weighing = store._statement("queue_weights_read", read_weights)
        weights = yield Step(weighing, {"b_queue": queue})
        sources = ("expired", "ready") if source == "any" else (source,)
        due = [
            due[at]
            for at in fair_order(
                [(sources[int(row.part)] == "expired", row.key) for row in due],
                {row.key: int(row.weight) for row in weights},
                running,
                stored.fair_cursor,
            )
        ]
    chosen = fit(
        (Candidate(row.id, row.key, int(row.weight)) for row in due),
        request.limit,
        caps,
        running,
        started,
    )
    if not chosen:
        return []
    # Where the dialect can, the claim logs its starts itself.
    logging = store._claim_logging_starts
    if logging is not None:
        statement = store._statement(
            f"claim_ids_logging_{source}", lambda: logging(claims.claim_ids(source))
        )
    else:
        statement = store._statement(f"claim_ids_{source}", lambda: claims.claim_ids(source))
    claim = Step(statement, {**params, "b_ids": [job.id for job in chosen]})
    claimed = yield from _taking_over(store, request, claim)
    # In the order they were chosen (the database returns them in its scan's order), so jobs
    # of equal rank keep it. Keyed by the ids' integers: a UUID hashes in Python, an int in C,
    # and a claim maps hundreds of them.
    position = {job.id.int: at for at, job in enumerate(chosen)}
    claimed = sorted(claimed, key=lambda row: position[row.id.int])
    if logging is not None:
        logged = {}
    elif len(claimed) == len(chosen) and all(row.state == RUNNING for row in claimed):
        logged = started_weights((job.key, job.weight) for job in chosen)
    else:  # some went meanwhile, or an expired lease was dead-lettered instead
        running_ids = {row.id.int for row in claimed if row.state == RUNNING}
        logged = started_weights(
            (job.key, job.weight) for job in chosen if job.id.int in running_ids
        )
    if logged:
        starts = [
            {"b_queue": queue, "b_key": key, "b_now": now, "b_weight": weight}
            for key, weight in logged.items()
        ]
        yield Step(store._statement("starts_log", log_starts), starts)
    if stored.fair:
        yield from _move_cursor(store, queue, stored.fair_cursor, claimed)
    return claimed


def _scan(caps: Caps, fair: bool, limit: int) -> int:
    """How many due jobs of each source a rated claim reads. With only queue-wide caps, the
    claim takes its candidates in order until one stops it (the heavier-than-the-rate ones are
    never read), so its batch's worth is enough; a per-key cap or fairness passes over keys,
    so it reads up to :data:`~caravel.store.claims.KEY_SCAN`."""
    if caps.per_key is None and caps.rate_per_key is None and not fair:
        return min(limit, claims.KEY_SCAN)
    return claims.KEY_SCAN
