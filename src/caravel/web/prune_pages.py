"""Pruning from the dashboard: a page that takes the ages, counts what they would remove (a dry
run) and offers the confirmation form; the POST of that form (checked by the guard for the
operator permission and the anti-forgery token) prunes and comes back with the totals.

The prune runs within the request, in the same bounded batches as ``caravel jobs prune``; for a
first prune of millions of rows, prefer the command line or the workers' schedule.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from caravel.errors import ValidationError
from caravel.queue import DatabaseQueue
from caravel.retention import Retention, parse_age
from caravel.validation import check_queue_name
from caravel.web.presentation import Renderer

__all__ = ["PrunePages"]

#: The form's fields: each an age in the command line's words (7d, 12h, 30m, 90s).
AGES = ("completed", "cancelled", "dead_letter", "keys")
_TOTALS = ("deleted", "tombstoned", "tombstones_deleted")


def _policy(
    values: Mapping[str, str],
) -> tuple[Retention | None, str | None, list[str], dict[str, str]]:
    """The retention and queue ``values`` name, every problem found, and the fields as typed."""
    typed = {name: (values.get(name) or "").strip() for name in (*AGES, "queue")}
    problems: list[str] = []
    ages: dict[str, timedelta | None] = {}
    for name in AGES:
        try:
            ages[name] = parse_age(name, typed[name])
        except ValidationError as exc:
            problems.append(str(exc))
    queue = typed["queue"] or None
    if queue is not None:
        try:
            check_queue_name(queue)
        except ValidationError as exc:
            problems.append(str(exc))
    if problems or all(age is None for age in ages.values()):
        return None, queue, problems, typed
    try:
        return Retention(**ages), queue, problems, typed
    except ValidationError as exc:
        return None, queue, [str(exc)], typed


class PrunePages:
    """The prune page and its action, writing through ``writer``."""

    def __init__(self, view: Renderer, writer: DatabaseQueue) -> None:
        self._view = view
        self._writer = writer

    async def prune_confirm(self, request: Request) -> Response:
        retention, queue, problems, typed = _policy(request.query_params)
        preview = None
        if retention is not None:
            preview = await self._writer.prune(retention, queue=queue, dry_run=True)
        done = {k: request.query_params.get(k) for k in _TOTALS if k in request.query_params}
        return self._view.render(
            request,
            "prune.html",
            refresh=0,
            nav="prune",
            page_title="Prune finished jobs",
            typed=typed,
            problems=problems,
            preview=preview,
            done=done,
            action=self._view.url_builder(request)("/prune"),
        )

    async def prune(self, request: Request) -> Response:
        form: dict[str, str] = request.state.form  # read and checked by the guard
        retention, queue, problems, _ = _policy(form)
        if retention is None:
            message = " ".join(problems) or "Give at least one age."
            return self._view.error(request, 400, "Nothing to prune", message)
        done = await self._writer.prune(retention, queue=queue)
        if done.busy:
            return self._view.error(
                request, 409, "Another pruner is running", "Nothing was done; try again later."
            )
        totals = {name: str(getattr(done, name)) for name in _TOTALS}
        return RedirectResponse(self._view.url_builder(request)("/prune", totals), status_code=303)
