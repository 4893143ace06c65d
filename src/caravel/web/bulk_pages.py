"""Cancelling and deleting every job of a queue that a filter matches, from the dashboard.

The jobs listing links here with its filters (queue, tenant, job type, state). The GET page
changes nothing: it shows the filter, takes an optional age (``older than``, as
``caravel jobs cancel --older-than`` takes it) and counts what would change, per state, by a dry
run through the queue. Only the POST of its form, which the guard checks for the operator
permission and the anti-forgery token, cancels or deletes, through the same
:meth:`~caravel.DatabaseQueue.cancel_matching` and
:meth:`~caravel.DatabaseQueue.delete_matching` the command line uses, in their bounded batches;
it then goes back to the listing, which says how many changed. A delete only ever removes
finished jobs, whatever the filter names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from caravel.cancelling import MatchedJobs, parse_older_than
from caravel.errors import ValidationError
from caravel.queue import DatabaseQueue
from caravel.store.removal import CANCELLABLE, DELETABLE
from caravel.web.filters import parse_filters
from caravel.web.presentation import Renderer

__all__ = ["Bulk", "BulkPages", "read_bulk"]

#: What each stored state takes in, as the confirmation page explains it.
STATE_MEANING = {
    "ready": "waiting: due now, delayed, or due for a retry",
    "running": "running, its lease live or expired",
    "completed": "completed",
    "dead_letter": "dead letters",
    "cancelled": "cancelled",
}


@dataclass(frozen=True, slots=True)
class Bulk:
    """One checked cancel or delete by filter: the queue, and every other filter given."""

    deleting: bool
    queue: str
    tenant: str | None = None
    job_type: str | None = None
    state: str | None = None
    """A stored state the action can touch; ``None``: every one it can."""
    older_than: str | None = None
    """As typed (``7d``); :attr:`age` is its value."""
    age: timedelta | None = None

    @property
    def verb(self) -> str:
        return "delete" if self.deleting else "cancel"

    @property
    def states(self) -> tuple[str, ...]:
        """The stored states this action may be limited to."""
        return tuple(state.value for state in (DELETABLE if self.deleting else CANCELLABLE))

    def query(self) -> dict[str, str]:
        """The filter as form fields or query parameters (only those given)."""
        found = {
            "queue": self.queue,
            "tenant": self.tenant,
            "type": self.job_type,
            "state": self.state,
            "older_than": self.older_than,
        }
        return {name: value for name, value in found.items() if value is not None}

    def listing(self) -> dict[str, str]:
        """The jobs listing's filters for this queue, tenant and type."""
        found = {"queue": self.queue, "tenant": self.tenant, "type": self.job_type}
        return {name: value for name, value in found.items() if value is not None}


def read_bulk(values: Mapping[str, str], *, deleting: bool) -> tuple[Bulk | None, list[str]]:
    """The cancel (or delete) ``values`` ask for, or ``None`` and what is wrong with them: a
    message per problem, in the queue's rules (no value is repeated back)."""
    filters, problems = parse_filters(values, with_state=False)
    verb = "delete" if deleting else "cancel"
    if filters.tag is not None:
        problems.append(f"Tag: a {verb} by filter cannot select by tag; leave it out.")
    allowed = tuple(state.value for state in (DELETABLE if deleting else CANCELLABLE))
    state = (values.get("state") or "").strip() or None
    if state is not None and state not in allowed:
        problems.append(f"State: a {verb} takes only " + ", ".join(allowed) + ".")
    older_than = (values.get("older_than") or "").strip() or None
    age = None
    try:
        age = parse_older_than("older_than", older_than)
    except ValidationError as exc:
        problems.append(f"Older than: {exc.rule}.")
    if filters.queue is None or problems:
        return None, problems
    bulk = Bulk(
        deleting=deleting,
        queue=filters.queue,
        tenant=filters.tenant,
        job_type=filters.job_type,
        state=state,
        older_than=older_than,
        age=age,
    )
    return bulk, problems


class BulkPages:
    """The cancel-matching and delete-matching pages of one dashboard, writing through
    ``writer``."""

    def __init__(self, view: Renderer, writer: DatabaseQueue) -> None:
        self._view = view
        self._writer = writer

    async def cancel_matching_confirm(self, request: Request) -> Response:
        return await self._confirm(request, deleting=False)

    async def delete_matching_confirm(self, request: Request) -> Response:
        return await self._confirm(request, deleting=True)

    async def cancel_matching(self, request: Request) -> Response:
        return await self._act(request, deleting=False)

    async def delete_matching(self, request: Request) -> Response:
        return await self._act(request, deleting=True)

    async def _run(self, bulk: Bulk, *, dry_run: bool) -> MatchedJobs:
        act = self._writer.delete_matching if bulk.deleting else self._writer.cancel_matching
        return await act(
            bulk.queue,
            job_type=bulk.job_type,
            tenant_id=bulk.tenant,
            states=None if bulk.state is None else [bulk.state],
            older_than=bulk.age,
            dry_run=dry_run,
        )

    def _no_queue(self, request: Request, verb: str) -> Response:
        return self._view.error(
            request,
            400,
            "Choose a queue",
            f"A {verb} by filter acts on the jobs of one queue. Filter the jobs listing by a "
            "queue first.",
        )

    async def _confirm(self, request: Request, *, deleting: bool) -> Response:
        values = request.query_params
        bulk, problems = read_bulk(values, deleting=deleting)
        verb = "delete" if deleting else "cancel"
        if bulk is None and not problems:
            return self._no_queue(request, verb)
        preview = None
        if bulk is not None:
            try:
                preview = await self._run(bulk, dry_run=True)
            except ValidationError as exc:  # a rule only the queue checks (the age's range)
                bulk, problems = None, [f"{exc}."]
        typed = {
            name: (values.get(name) or "").strip()
            for name in ("queue", "tenant", "type", "state", "older_than")
        }
        return self._view.render(
            request,
            "bulk_confirm.html",
            status=400 if problems else 200,
            refresh=0,
            nav="jobs",
            page_title=f"{verb.capitalize()} matching jobs",
            verb=verb,
            bulk=bulk,
            typed=typed,
            states=DELETABLE if deleting else CANCELLABLE,
            meaning=STATE_MEANING,
            problems=problems,
            preview=preview,
            matching=0 if preview is None else sum(preview.matched.values()),
            action=self._view.url_builder(request)(f"/jobs/{verb}"),
        )

    async def _act(self, request: Request, *, deleting: bool) -> Response:
        form: dict[str, str] = request.state.form  # read and checked by the guard
        bulk, problems = read_bulk(form, deleting=deleting)
        verb = "delete" if deleting else "cancel"
        if bulk is None:
            if not problems:
                return self._no_queue(request, verb)
            return self._view.error(request, 400, "Invalid filter", " ".join(problems))
        try:
            done = await self._run(bulk, dry_run=False)
        except ValidationError as exc:
            return self._view.error(request, 400, "Invalid filter", f"{exc}.")
        if done.changed == 0:
            return self._view.error(
                request,
                409,
                f"Nothing {'deleted' if deleting else 'cancelled'}",
                "No job of this queue matches the filter now, so nothing was done.",
            )
        notice = {"deleted" if deleting else "cancelled": str(done.changed)}
        where = self._view.url_builder(request)("/jobs", bulk.listing(), **notice)
        return RedirectResponse(where, status_code=303)
