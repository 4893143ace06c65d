"""A queue's concurrency limits and fair dispatch on the dashboard: the page that shows how the
queue stands against them (its caps, whether it is fair and its weights, its jobs running, its
ready jobs waiting because of a limit, its busiest partition keys), and the POSTs of its two
forms, set and clear, which the guard checks for the operator permission and the anti-forgery
token as it does for a pause. The queue is named by the path and the form names it again; a
name that breaks the naming rule, a form that names another queue, or a cap, fairness or a
weight that breaks :class:`~caravel.flow.ConcurrencyLimit`'s rules is a 400 naming the field,
and nothing is written.

Every change is logged on ``caravel.web`` (the queue, the caps, fairness, how many weights but
never their keys, which are tenant ids, and who changed them), the dashboard's audit trail. The
limits are the stored ones ``caravel queues limits`` changes too: running workers follow them
within their poll interval (on PostgreSQL at once)."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from caravel.errors import ValidationError
from caravel.flow import ConcurrencyLimit
from caravel.inspector import QueueInspector
from caravel.queue import DatabaseQueue
from caravel.validation import check_queue_name
from caravel.web.auth import principal_of
from caravel.web.presentation import Renderer

__all__ = ["LIMIT_NOTICES", "LimitPages"]

logger = logging.getLogger("caravel.web")

#: How many partition keys the page shows, the most running first.
SHOWN_KEYS = 20

LIMIT_NOTICES = {
    "limits-set": "Limits stored: workers follow them within their poll interval (on PostgreSQL "
    "at once). Jobs already running are not touched.",
    "limits-cleared": "Limits cleared: workers claim the queue's jobs without them.",
    "no-limits": "The queue had no limits.",
}

_RULE = (
    "A queue name is 1 to 64 characters of lowercase letters, digits, '.', '-' or '_', and the "
    "form must name the queue of its address."
)


class LimitPages:
    """The limits page of one dashboard; changes write through ``writer``."""

    def __init__(self, view: Renderer, reader: QueueInspector, writer: DatabaseQueue) -> None:
        self._view = view
        self._reader = reader
        self._writer = writer

    async def show(self, request: Request) -> Response:
        queue = self._name(request)
        if queue is None:
            return self._bad_name(request)
        found = await self._reader.queue_limit_usage(queue, keys=SHOWN_KEYS)
        url = self._view.url_builder(request)
        return self._view.render(
            request,
            "queue_limits.html",
            nav="overview",
            page_title=f"Limits of {queue}",
            queue=queue,
            usage=found[0] if found else None,
            shown_keys=SHOWN_KEYS,
            set_action=url(f"/queues/{queue}/limits"),
            clear_action=url(f"/queues/{queue}/limits/clear"),
            notice=LIMIT_NOTICES.get(request.query_params.get("notice", "")),
        )

    async def set(self, request: Request) -> Response:
        queue = self._formed(request)
        if queue is None:
            return self._bad_name(request)
        form: dict[str, str] = request.state.form
        try:
            limit = ConcurrencyLimit(
                queue=queue,
                concurrency=_cap(form, "concurrency"),
                per_key=_cap(form, "per_key"),
                fair=_ticked(form, "fair"),
                weights=_weights(form),  # type: ignore[arg-type]
            )
        except ValidationError as exc:
            return self._view.error(request, 400, "Invalid limits", f"{exc.field}: {exc.rule}")
        await self._writer.set_queue_limit(limit)
        logger.info(
            "queue concurrency limit set from the dashboard",
            extra={
                "queue": queue,
                "concurrency": limit.concurrency,
                "per_key": limit.per_key,
                "fair": limit.fair,
                "weights": len(limit.weights),
                "principal": _who(request),
            },
        )
        return self._back(request, queue, "limits-set")

    async def clear(self, request: Request) -> Response:
        queue = self._formed(request)
        if queue is None:
            return self._bad_name(request)
        cleared = await self._writer.clear_queue_limit(queue)
        logger.info(
            "queue concurrency limit cleared from the dashboard",
            extra={"queue": queue, "changed": cleared, "principal": _who(request)},
        )
        return self._back(request, queue, "limits-cleared" if cleared else "no-limits")

    def _back(self, request: Request, queue: str, notice: str) -> Response:
        url = self._view.url_builder(request)(f"/queues/{queue}/limits", notice=notice)
        return RedirectResponse(url, status_code=303)

    def _name(self, request: Request) -> str | None:
        try:
            return check_queue_name(request.path_params["queue"])
        except ValidationError:
            return None

    def _formed(self, request: Request) -> str | None:
        """The path's queue when the form (read and checked by the guard) names it too."""
        queue = self._name(request)
        form: dict[str, str] = request.state.form
        return queue if queue is not None and form.get("queue") == queue else None

    def _bad_name(self, request: Request) -> Response:
        return self._view.error(request, 400, "Invalid queue", _RULE)


def _cap(form: dict[str, str], field: str) -> int | None:
    """A cap from the form: blank is no cap; anything but decimal digits is refused naming
    ``field`` (the value is never echoed)."""
    text = form.get(field, "").strip()
    if not text:
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 7:
        raise ValidationError(field, "must be a whole number from 1 to 100000, or blank")
    return int(text)


def _ticked(form: dict[str, str], field: str) -> bool:
    """A checkbox: absent is off, ``on`` (what the page sends) is on; anything else is refused
    naming ``field``."""
    value = form.get(field)
    if value is None:
        return False
    if value != "on":
        raise ValidationError(field, "must be ticked (on) or left out")
    return True


def _weights(form: dict[str, str]) -> dict[str, object]:
    """The weights field: one ``KEY=N`` a line, blank lines skipped (checked then by
    :class:`~caravel.flow.ConcurrencyLimit`); a line of another form, or a key named twice, is
    refused naming ``weights`` (the value is never echoed)."""
    weights: dict[str, object] = {}
    for line in form.get("weights", "").splitlines():
        item = line.strip()
        if not item:
            continue
        key, sep, number = item.rpartition("=")
        number = number.strip()
        if not sep or not number.isascii() or not number.isdigit() or len(number) > 7:
            raise ValidationError("weights", "one KEY=N a line, N a whole number from 1 to 1000")
        if key in weights:
            raise ValidationError("weights", "name each partition key once")
        weights[key] = int(number)
    return weights


def _who(request: Request) -> str | None:
    principal = principal_of(request)
    return None if principal is None else principal.name
