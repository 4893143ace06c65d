"""Reading the dashboard's query parameters and form fields: job filters, pages and sizes.

Every value the user controls is checked with the queue's own rules before it reaches the
database, and every number is clamped to a range, so a crafted URL can neither fail a query nor
ask for a million rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from uuid import UUID

from caravel.errors import ValidationError
from caravel.lookup import parse_job_id
from caravel.store.protocol import SHOWN_STATES, ShownState
from caravel.store.removal import CANCELLABLE, DELETABLE
from caravel.tags import check_tag
from caravel.validation import check_identifier, check_queue_name, check_wire_name

__all__ = [
    "PER_PAGE_CHOICES",
    "STORED_STATE",
    "Filters",
    "Paging",
    "clamp_int",
    "parse_filters",
    "parse_paging",
    "removal_query",
]

PER_PAGE_CHOICES = (20, 50, 100, 200)
MAX_PAGE = 5_000
_INTEGER = re.compile(r"-?[0-9]{1,12}")


def clamp_int(raw: str | None, *, default: int, low: int, high: int) -> int:
    """``raw`` as an integer within ``low..high``; ``default`` when it is missing or not a
    plain integer."""
    if raw is None or not _INTEGER.fullmatch(raw.strip()):
        return default
    return min(max(int(raw.strip()), low), high)


@dataclass(frozen=True, slots=True)
class Filters:
    """Which jobs a page lists. Every given field must match exactly."""

    queue: str | None = None
    tenant: str | None = None
    state: ShownState | None = None
    """In ``caravel status``'s words (``delayed``, ``expired``, ...), judged at the page's now."""
    job_type: str | None = None
    tag: str | None = None
    """A tag the jobs must carry (exactly)."""
    batch: UUID | None = None
    """The batch the jobs are members of (the jobs listing only)."""

    def query(self) -> dict[str, str]:
        """The filters as URL query parameters (only those given)."""
        found = {
            "queue": self.queue,
            "tenant": self.tenant,
            "state": self.state,
            "type": self.job_type,
            "tag": self.tag,
            "batch": None if self.batch is None else str(self.batch),
        }
        return {name: value for name, value in found.items() if value is not None}

    @property
    def any(self) -> bool:
        return bool(self.query())


def _text(values: Mapping[str, str], name: str, *, strip: bool = True) -> str | None:
    raw = values.get(name)
    if raw is None:
        return None
    value = raw.strip() if strip else raw
    return value if value.strip() else None


def parse_filters(
    values: Mapping[str, str], *, with_state: bool = True, with_batch: bool = False
) -> tuple[Filters, list[str]]:
    """The filters in ``values`` (query parameters or form fields), and a message for each
    value that breaks the queue's rules (that filter is then left out). Only pages that pass
    ``with_batch`` read ``batch``: every other page acts on what it can select, and it cannot
    select by batch."""
    problems: list[str] = []
    queue = _text(values, "queue")
    tenant = _text(values, "tenant", strip=False)
    job_type = _text(values, "type")
    tag = _text(values, "tag")
    state_text = _text(values, "state") if with_state else None
    try:
        if queue is not None:
            check_queue_name(queue)
    except ValidationError as exc:
        problems.append(f"Queue: {exc.rule}.")
        queue = None
    try:
        if tenant is not None:
            check_identifier(tenant, "tenant_id")
    except ValidationError as exc:
        problems.append(f"Tenant: {exc.rule}.")
        tenant = None
    try:
        if job_type is not None:
            check_wire_name(job_type, "job_type")
    except ValidationError as exc:
        problems.append(f"Job type: {exc.rule}.")
        job_type = None
    try:
        if tag is not None:
            check_tag(tag)
    except ValidationError as exc:
        problems.append(f"Tag: {exc.rule}.")
        tag = None
    batch = None
    batch_text = _text(values, "batch") if with_batch else None
    try:
        if batch_text is not None:
            batch = parse_job_id(batch_text, "batch")
    except ValidationError as exc:
        problems.append(f"Batch: {exc.rule} (the id a batch page shows).")
    state: ShownState | None = None
    if state_text is not None:
        if state_text in SHOWN_STATES:
            state = state_text
        else:
            problems.append("State: must be " + ", ".join(SHOWN_STATES) + ".")
    found = Filters(
        queue=queue, tenant=tenant, state=state, job_type=job_type, tag=tag, batch=batch
    )
    return found, problems


#: The stored state behind each state a listing shows: what a cancel or delete by filter, which
#: selects by stored state, takes for it (``delayed`` jobs are stored ``ready``, ``expired``
#: ones ``running``).
STORED_STATE: dict[ShownState, str] = {
    "ready": "ready",
    "delayed": "ready",
    "held": "ready",
    "running": "running",
    "expired": "running",
    "dead_letter": "dead_letter",
    "completed": "completed",
    "cancelled": "cancelled",
}


def removal_query(filters: Filters, *, deleting: bool) -> dict[str, str] | None:
    """The query of the page that cancels (or, ``deleting``, deletes) the jobs a listing's
    ``filters`` match, or ``None`` when no such page can: no queue is chosen (a cancel or
    delete by filter acts on one queue), a tag or a batch is (it cannot select by either), or
    the state is one it never touches. The listing's state becomes its stored state, which may
    take in more jobs (all waiting jobs for ``delayed``); the page shows the stored state and
    the count."""
    if filters.queue is None or filters.tag is not None or filters.batch is not None:
        return None
    query = {"queue": filters.queue, "tenant": filters.tenant, "type": filters.job_type}
    if filters.state is not None:
        stored = STORED_STATE[filters.state]
        if stored not in {state.value for state in (DELETABLE if deleting else CANCELLABLE)}:
            return None
        query["state"] = stored
    return {name: value for name, value in query.items() if value is not None}


@dataclass(frozen=True, slots=True)
class Paging:
    """One page of a listing, ordered by creation time."""

    page: int = 1
    per_page: int = 50
    oldest_first: bool = False

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.per_page

    def query(self) -> dict[str, str]:
        found = {"page": str(self.page), "per_page": str(self.per_page)}
        if self.oldest_first:
            found["order"] = "oldest"
        return found


def parse_paging(values: Mapping[str, str]) -> Paging:
    """Page number (1 to 5000), page size (20, 50, 100 or 200; others are clamped to the
    nearest allowed bound) and order (``newest``, the default, or ``oldest``)."""
    per_page = clamp_int(
        values.get("per_page"),
        default=50,
        low=PER_PAGE_CHOICES[0],
        high=PER_PAGE_CHOICES[-1],
    )
    page = clamp_int(values.get("page"), default=1, low=1, high=MAX_PAGE)
    return Paging(page=page, per_page=per_page, oldest_first=values.get("order") == "oldest")
