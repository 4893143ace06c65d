"""Cancelling and deleting jobs by filter, as the queue offers it (and the command line and the
dashboard use it): the filter checked into a :class:`~caravel.store.removal.JobSelection`, and
the loop that acts on it in bounded batches, so no transaction ever holds more than one batch of
rows however many jobs match."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from caravel.errors import ValidationError
from caravel.jobs import JobState
from caravel.store.protocol import Store
from caravel.store.removal import CANCELLABLE, DELETABLE, JobSelection
from caravel.validation import check_identifier, check_int, check_queue_name, check_wire_name

__all__ = [
    "BATCH",
    "MAX_BATCH",
    "MatchedJobs",
    "act_on_matching",
    "cancel_all",
    "delete_all",
    "parse_older_than",
    "selection",
]

#: Rows per statement of a bulk cancel or delete, unless the caller says otherwise.
BATCH = 500
MAX_BATCH = 10_000
#: The oldest ``older_than`` accepted (about 100 years): beyond it the cut-off means nothing.
_LONGEST_AGE = timedelta(days=36_500)
_AGE = re.compile(r"^(\d{1,9})([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True, slots=True)
class MatchedJobs:
    """What a cancel or delete by filter found and did. ``matched`` counts the jobs per state
    that matched when it began (states with none left out); ``changed`` is how many it then
    cancelled or deleted: 0 on a dry run, and it may differ from the matched total when jobs
    changed state meanwhile (a waiting job finished, another was enqueued)."""

    matched: dict[JobState, int]
    changed: int


def parse_older_than(field: str, text: str | None) -> timedelta | None:
    """An ``older_than`` as operators type it (the command line's ``--older-than`` and the
    dashboard's field): a whole number and a unit, ``90s``, ``30m``, ``12h`` or ``7d``;
    ``None`` for none. A unit is required here, unlike a prune's ages: a bare number before a
    cancel or delete is too easy to misread."""
    if text is None:
        return None
    found = _AGE.match(text.strip())
    if found is None:
        raise ValidationError(field, "must be a whole number and a unit: 90s, 30m, 12h, 7d")
    return timedelta(seconds=int(found.group(1)) * _UNIT_SECONDS[found.group(2)])


def selection(
    queue: object,
    now: int,
    *,
    deleting: bool,
    job_type: object = None,
    tenant_id: object = None,
    states: Iterable[object] | None = None,
    older_than: object = None,
) -> JobSelection:
    """The checked selection of ``queue``'s jobs a bulk cancel (or, ``deleting``, a delete)
    acts on; raises :class:`~caravel.errors.ValidationError` naming the bad field. ``states``
    left out means every state the operation can touch; ``older_than`` is measured back from
    ``now`` (a cancel compares creation, a delete the moment the job finished)."""
    allowed = DELETABLE if deleting else CANCELLABLE
    action = "delete" if deleting else "cancel"
    chosen: tuple[JobState, ...] = allowed
    if states is not None:
        chosen = tuple(_state(value, allowed, action) for value in states)
        if not chosen:
            raise ValidationError("states", "must name at least one state when given")
    before = None
    if older_than is not None:
        if not isinstance(older_than, timedelta):
            raise ValidationError("older_than", "must be a datetime.timedelta")
        if not timedelta(0) < older_than <= _LONGEST_AGE:
            raise ValidationError("older_than", "must be more than 0 and at most 36500 days")
        before = now - int(older_than.total_seconds() * 1000)
    return JobSelection(
        queue=check_queue_name(queue),
        states=chosen,
        job_type=None if job_type is None else check_wire_name(job_type, "job_type"),
        tenant_id=None if tenant_id is None else check_identifier(tenant_id, "tenant_id"),
        before=before,
    )


def _state(value: object, allowed: tuple[JobState, ...], action: str) -> JobState:
    names = ", ".join(state.value for state in allowed)
    try:
        state = JobState(str(value))
    except ValueError:
        raise ValidationError("states", f"a {action} takes only {names}") from None
    if state not in allowed:
        raise ValidationError("states", f"a {action} takes only {names}")
    return state


async def cancel_all(store: Store, chosen: JobSelection, now: int, batch: int = BATCH) -> int:
    """Cancel every job ``chosen`` matches, ``batch`` per statement; how many."""
    check_int("batch", batch, 1, MAX_BATCH)
    total = 0
    while True:
        done = await store.job_cancel_many(chosen, now, batch)
        total += done
        if done < batch:
            return total


async def delete_all(store: Store, chosen: JobSelection, batch: int = BATCH) -> int:
    """Delete every finished job ``chosen`` matches, ``batch`` per statement; how many."""
    check_int("batch", batch, 1, MAX_BATCH)
    total = 0
    while True:
        done = await store.job_delete_many(chosen, batch)
        total += done
        if done < batch:
            return total


async def act_on_matching(
    store: Store,
    queue: object,
    now: int,
    *,
    deleting: bool,
    job_type: object = None,
    tenant_id: object = None,
    states: Iterable[object] | None = None,
    older_than: object = None,
    dry_run: bool = False,
) -> MatchedJobs:
    """Count the jobs of ``queue`` the filter matches (:func:`selection`), then, unless
    ``dry_run`` or none matched, cancel them (or, ``deleting``, delete them) in bounded batches:
    :meth:`DatabaseQueue.cancel_matching <caravel.DatabaseQueue.cancel_matching>` and
    :meth:`~caravel.DatabaseQueue.delete_matching`."""
    chosen = selection(
        queue,
        now,
        deleting=deleting,
        job_type=job_type,
        tenant_id=tenant_id,
        states=states,
        older_than=older_than,
    )
    counted = await store.job_count_selected(chosen, deleting=deleting)
    if dry_run or not counted:
        return MatchedJobs(counted, 0)
    if deleting:
        changed = await delete_all(store, chosen)
    else:
        changed = await cancel_all(store, chosen, now)
    return MatchedJobs(counted, changed)
