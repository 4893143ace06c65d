"""A queue's flow control on the dashboard: the page that shows how the queue stands against
its limits (its caps, whether it is fair and its weights, its jobs running, its ready jobs
waiting because of a limit, its busiest partition keys; its rate and the weight of the starts in
the window that ends now), and the POSTs of its forms: set the concurrency limits and fairness,
set the rate, and clear (all limits, or only one kind), which the guard checks for the operator
permission and the anti-forgery token as it does for a pause. The queue is named by the path
and the form names it again; a name that breaks the naming rule, or a form that names another
queue, is a 400 page saying so. A value that breaks :class:`~caravel.flow.ConcurrencyLimit`'s
or :class:`~caravel.flow.RateLimit`'s rules, or a rate below the weight of a job waiting in the
queue, is the limits page again, with status 400 and the field named; nothing is written.

Every change is logged on ``caravel.web`` (the queue, the caps, fairness, how many weights but
never their keys, which are tenant ids, the rates and their period, and who changed them), the
dashboard's audit trail. The limits are the stored ones ``caravel queues limits`` changes too:
running workers follow them within their poll interval (on PostgreSQL at once)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TypeAlias

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from caravel.errors import ValidationError
from caravel.flow import MAX_CONCURRENCY_LIMIT, MAX_RATE, ConcurrencyLimit, RateLimit
from caravel.flow.rate import MAX_PERIOD
from caravel.inspector import QueueInspector
from caravel.queue import DatabaseQueue
from caravel.store.protocol import LimitKind
from caravel.validation import check_queue_name
from caravel.web.auth import principal_of
from caravel.web.presentation import Renderer

__all__ = ["LIMIT_NOTICES", "LimitPages"]

logger = logging.getLogger("caravel.web")

#: How many partition keys the page shows, the most running first.
SHOWN_KEYS = 20

#: The longest period the rate form takes, in its unit (seconds).
MAX_PERIOD_SECONDS = MAX_PERIOD // timedelta(seconds=1)

LIMIT_NOTICES = {
    "limits-set": "Limits stored: workers follow them within their poll interval (on PostgreSQL "
    "at once). Jobs already running are not touched.",
    "limits-cleared": "Limits cleared: workers claim the queue's jobs without them.",
    "no-limits": "The queue had no limits.",
    "rate-set": "Rate stored: workers follow it within their poll interval (on PostgreSQL at "
    "once). Starts already made count until they leave the window.",
    "rate-cleared": "Rate cleared: workers start the queue's jobs without it; its concurrency "
    "limits and fair dispatch stay.",
    "no-rate": "The queue had no rate.",
    "concurrency-cleared": "Concurrency limits and fair dispatch cleared; the rate stays.",
    "no-concurrency": "The queue had no concurrency limits and no fair dispatch.",
}

_RULE = (
    "A queue name is 1 to 64 characters of lowercase letters, digits, '.', '-' or '_', and the "
    "form must name the queue of its address."
)

_Limit: TypeAlias = ConcurrencyLimit | RateLimit


@dataclass(frozen=True, slots=True)
class _SetForm:
    """One of the page's set forms: ``read`` makes its limit from the queue and the form's
    fields (with the audit line's fields), ``logged`` is the audit line, ``notice`` the
    :data:`LIMIT_NOTICES` key shown after, and ``renamed`` the form's name of each field the
    limit's rules call otherwise."""

    read: Callable[[str, Mapping[str, str]], tuple[_Limit, dict[str, object]]]
    logged: str
    notice: str
    renamed: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Clear:
    """What the clear form removes, by its ``only`` field: the kind, the audit line, and the
    notice when it removed something and when the queue had none of that kind."""

    kind: LimitKind
    logged: str
    cleared: str
    absent: str


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
        notice = LIMIT_NOTICES.get(request.query_params.get("notice", ""))
        return await self._page(request, queue, notice=notice)

    async def set(self, request: Request) -> Response:
        """Store the concurrency caps and fair dispatch of the form (the rate stays)."""
        return await self._store(request, _CAPS_FORM)

    async def set_rate(self, request: Request) -> Response:
        """Store the rate of the form (the concurrency caps and fair dispatch stay)."""
        return await self._store(request, _RATE_FORM)

    async def clear(self, request: Request) -> Response:
        """Remove the queue's limits, or only those of the kind the form's ``only`` names."""
        queue = self._formed(request)
        if queue is None:
            return self._bad_name(request)
        form: dict[str, str] = request.state.form
        clear = _CLEARS.get(form.get("only", ""))
        if clear is None:
            refused = ValidationError("only", "must be 'concurrency' or 'rate', or left out")
            return await self._refuse(request, queue, refused)
        cleared = await self._writer.clear_queue_limit(queue, clear.kind)
        logger.info(
            clear.logged,
            extra={
                "queue": queue,
                "kind": clear.kind,
                "changed": cleared,
                "principal": _who(request),
            },
        )
        return self._back(request, queue, clear.cleared if cleared else clear.absent)

    async def _store(self, request: Request, change: _SetForm) -> Response:
        queue = self._formed(request)
        if queue is None:
            return self._bad_name(request)
        try:
            limit, audit = change.read(queue, request.state.form)
            await self._writer.set_queue_limit(limit)
        except ValidationError as exc:
            named = change.renamed.get(exc.field, exc.field)
            return await self._refuse(request, queue, ValidationError(named, exc.rule))
        logger.info(change.logged, extra={"queue": queue, **audit, "principal": _who(request)})
        return self._back(request, queue, change.notice)

    async def _page(
        self, request: Request, queue: str, *, notice: str | None = None, refused: str | None = None
    ) -> Response:
        """The page; with ``refused`` (a form's broken rule), a 400 that says it and does not
        update itself."""
        found = await self._reader.queue_limit_usage(queue, keys=SHOWN_KEYS)
        url = self._view.url_builder(request)
        return self._view.render(
            request,
            "queue_limits.html",
            status=200 if refused is None else 400,
            refresh=None if refused is None else 0,
            nav="overview",
            page_title=f"Limits of {queue}",
            queue=queue,
            usage=found[0] if found else None,
            shown_keys=SHOWN_KEYS,
            max_cap=MAX_CONCURRENCY_LIMIT,
            max_rate=MAX_RATE,
            max_period=MAX_PERIOD_SECONDS,
            set_action=url(f"/queues/{queue}/limits"),
            rate_action=url(f"/queues/{queue}/limits/rate"),
            clear_action=url(f"/queues/{queue}/limits/clear"),
            notice=notice,
            refused=refused,
        )

    async def _refuse(self, request: Request, queue: str, exc: ValidationError) -> Response:
        """The page again, saying which field broke which rule (the value is never echoed)."""
        return await self._page(request, queue, refused=str(exc))

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


def _whole(form: Mapping[str, str], field: str, rule: str) -> int | None:
    """A whole number from the form: blank is ``None``; anything but decimal digits is refused
    naming ``field`` with ``rule`` (the value is never echoed). The range is the limit's to
    check."""
    text = form.get(field, "").strip()
    if not text:
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 7:
        raise ValidationError(field, rule)
    return int(text)


def _ticked(form: Mapping[str, str], field: str) -> bool:
    """A checkbox: absent is off, ``on`` (what the page sends) is on; anything else is refused
    naming ``field``."""
    value = form.get(field)
    if value is None:
        return False
    if value != "on":
        raise ValidationError(field, "must be ticked (on) or left out")
    return True


def _weights(form: Mapping[str, str]) -> dict[str, object]:
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


_CAP_RULE = f"must be a whole number from 1 to {MAX_CONCURRENCY_LIMIT}, or blank"
_RATE_RULE = f"must be a whole number from 1 to {MAX_RATE}, or blank"
_PERIOD_RULE = f"must be a whole number of seconds from 1 to {MAX_PERIOD_SECONDS} (blank: 1)"


def _concurrency_of(queue: str, form: Mapping[str, str]) -> tuple[_Limit, dict[str, object]]:
    """The caps form: ``concurrency`` and ``per_key`` (blank: no such cap), ``fair`` and its
    ``weights``, as ``caravel queues limits set --concurrency --per-key --fair --weight``."""
    limit = ConcurrencyLimit(
        queue=queue,
        concurrency=_whole(form, "concurrency", _CAP_RULE),
        per_key=_whole(form, "per_key", _CAP_RULE),
        fair=_ticked(form, "fair"),
        weights=_weights(form),  # type: ignore[arg-type]
    )
    audit: dict[str, object] = {
        "concurrency": limit.concurrency,
        "per_key": limit.per_key,
        "fair": limit.fair,
        "weights": len(limit.weights),
    }
    return limit, audit


def _rate_of(queue: str, form: Mapping[str, str]) -> tuple[_Limit, dict[str, object]]:
    """The rate form: ``rate`` and ``rate_per_key`` (blank: no such rate), within any window of
    ``period`` seconds (blank: 1), as ``caravel queues limits set --rate --rate-per-key
    --period``."""
    rate = _whole(form, "rate", _RATE_RULE)
    per_key = _whole(form, "rate_per_key", _RATE_RULE)
    seconds = _whole(form, "period", _PERIOD_RULE)
    if rate is None and per_key is None:
        raise ValidationError("rate", "give a rate, a rate per key or both (or clear the rate)")
    limit = RateLimit(
        queue=queue,
        rate=rate,
        per_key=per_key,
        period=timedelta(seconds=1 if seconds is None else seconds),
    )
    audit: dict[str, object] = {
        "rate": limit.rate,
        "rate_per_key": limit.per_key,
        "period_ms": limit.period_ms,
    }
    return limit, audit


_CAPS_FORM = _SetForm(
    _concurrency_of, "queue concurrency limit set from the dashboard", "limits-set"
)
_RATE_FORM = _SetForm(
    _rate_of, "queue rate limit set from the dashboard", "rate-set", {"per_key": "rate_per_key"}
)

#: The clear form, by its ``only`` field (as ``caravel queues limits clear --only``; blank or
#: left out: every limit).
_CLEARS: Mapping[str, _Clear] = {
    "": _Clear("all", "queue limits cleared from the dashboard", "limits-cleared", "no-limits"),
    "concurrency": _Clear(
        "concurrency",
        "queue concurrency limit cleared from the dashboard",
        "concurrency-cleared",
        "no-concurrency",
    ),
    "rate": _Clear(
        "rate", "queue rate limit cleared from the dashboard", "rate-cleared", "no-rate"
    ),
}


def _who(request: Request) -> str | None:
    principal = principal_of(request)
    return None if principal is None else principal.name
