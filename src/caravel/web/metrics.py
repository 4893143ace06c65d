"""``/metrics``: the autoscaling signal (:mod:`caravel.autoscaling`) over HTTP, read-only.

JSON by default (what KEDA's metrics-api scaler reads); Prometheus's text format with
``?format=prometheus`` or when the request accepts ``text/plain`` or OpenMetrics and not JSON
(what a Prometheus scrape sends). ``?queue=NAME`` keeps one queue (always listed, zeros
included), ``?keys=N`` the busiest N partition keys of a limited queue (0 to 1,000; 20 by
default).

A signal read less than ``max_age`` ago (1 second by default) is answered again, and requests
arriving while it is read share that read (:mod:`caravel.web.shared_signal`): any number of
scrapers cost one read of the database per ``max_age``.

The dashboard serves it as a ``read`` route, behind its own access control. :func:`metrics_app`
serves it alone, with the same rule: ``authorize`` decides, and without it only requests made
on this machine to a loopback address are answered.
"""

from __future__ import annotations

import inspect
import json
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from caravel.autoscaling import PROMETHEUS_CONTENT_TYPE, prometheus_text, signal_document
from caravel.clock import Clock
from caravel.errors import CaravelError, PrincipalTypeError, ValidationError
from caravel.inspector import QueueInspector
from caravel.validation import check_duration
from caravel.web.auth import Authorize, Principal, refusal_reason
from caravel.web.lifespan import serve_lifespan
from caravel.web.shared_signal import MAX_AGE, SharedSignal, check_max_age

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = ["MetricsApp", "MetricsEndpoint", "metrics_app"]

Format = Literal["json", "prometheus"]
_FORMATS: tuple[Format, ...] = ("json", "prometheus")


def _error(status: int, kind: str, message: str) -> Response:
    """One line of JSON, as the command line writes its errors."""
    body = json.dumps({"error": {"type": kind, "message": message}}, separators=(",", ":"))
    return Response(body + "\n", status, media_type="application/json")


def wanted_format(request: Request) -> Format:
    """``?format=`` when given, else what the ``Accept`` header prefers; JSON when unclear.
    Raises :class:`~caravel.errors.ValidationError` for an unknown ``format``."""
    given = request.query_params.get("format")
    if given is not None:
        if given not in _FORMATS:
            raise ValidationError("format", "must be json or prometheus")
        return "json" if given == "json" else "prometheus"
    accept = request.headers.get("accept", "").lower()
    if "application/json" in accept:
        return "json"
    if "text/plain" in accept or "application/openmetrics-text" in accept:
        return "prometheus"
    return "json"


def _keys(request: Request) -> int:
    text = request.query_params.get("keys", "20")
    if not text.isdigit() or int(text) > 1000:
        raise ValidationError("keys", "must be a whole number from 0 to 1000")
    return int(text)


class MetricsEndpoint:
    """The ``/metrics`` handler over one reader: what each worker counts as lost after
    ``lost_after`` without a heartbeat is no longer counted, and a signal read less than
    ``max_age`` ago is answered again (0: every request reads)."""

    def __init__(
        self, reader: QueueInspector, *, lost_after: timedelta, max_age: timedelta = MAX_AGE
    ) -> None:
        self.reader = reader
        self.lost_after = lost_after
        self.signal = SharedSignal(reader, max_age=max_age)

    async def __call__(self, request: Request) -> Response:
        """The signal, or a one-line JSON error: 400 for a bad parameter, 503 when the
        database is not migrated or not answering."""
        try:
            shape = wanted_format(request)
            signal = await self.signal.read(
                request.query_params.get("queue"),
                lost_after=self.lost_after,
                keys=_keys(request),
            )
        except ValidationError as exc:
            return _error(400, "ValidationError", str(exc))
        except CaravelError as exc:
            return _error(503, type(exc).__name__, str(exc))
        headers = {"Cache-Control": "no-store"}
        if shape == "prometheus":
            headers["Content-Type"] = PROMETHEUS_CONTENT_TYPE
            return Response(prometheus_text(signal), headers=headers)
        return JSONResponse(signal_document(signal), headers=headers)


class MetricsApp:
    """``/metrics`` alone, as an ASGI application (built by :func:`metrics_app`). When it
    runs on its own, the server's lifespan closes it; mounted elsewhere, call :meth:`close`."""

    def __init__(
        self,
        reader: QueueInspector,
        *,
        authorize: Authorize | None,
        lost_after: timedelta,
        max_age: timedelta = MAX_AGE,
    ) -> None:
        self.reader = reader
        self._authorize = authorize
        self._endpoint = MetricsEndpoint(reader, lost_after=lost_after, max_age=max_age)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, self.close)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        request = Request(scope, receive)
        response = await self._answer(request)
        await response(scope, receive, send)

    async def _answer(self, request: Request) -> Response:
        path = request.url.path.removeprefix(request.scope.get("root_path", "")) or "/"
        if path != "/metrics":
            return _error(404, "NotFound", "only /metrics is served here")
        if request.method not in ("GET", "HEAD"):
            return _error(405, "MethodNotAllowed", "/metrics answers GET only")
        refused = await self._refusal(request)
        if refused is not None:
            return refused
        return await self._endpoint(request)

    async def _refusal(self, request: Request) -> Response | None:
        """Why the request may not read the signal, as a response; ``None`` when it may."""
        if self._authorize is None:
            reason = refusal_reason(request)
            if reason is None:
                return None
            return _error(
                403, "Forbidden", f"{reason}; without authorize only local requests are answered"
            )
        found = self._authorize(request)
        if inspect.isawaitable(found):
            found = await found
        if found is not None and not isinstance(found, Principal):
            raise PrincipalTypeError
        if found is None:
            return _error(401, "Unauthorized", "authorize did not recognise the request")
        if not found.can_read:
            return _error(403, "Forbidden", "this principal may not read")
        return None

    async def close(self) -> None:
        """Release the database connections."""
        await self.reader.close()


def metrics_app(
    queue_url: str | sa.URL,
    *,
    authorize: Authorize | None = None,
    lost_after: timedelta = timedelta(seconds=60),
    max_age: timedelta = MAX_AGE,
    clock: Clock | None = None,
) -> MetricsApp:
    """The autoscaling signal of the queue at ``queue_url`` alone, at ``/metrics``, as an ASGI
    application reading through a read-only connection.

    Args:
        queue_url: the queue database, migrated.
        authorize: as the dashboard's (:func:`~caravel.web.dashboard`): the principal making
            the request, who needs ``can_read``. Without it only requests made on this machine
            to a loopback address are answered.
        lost_after: a worker not heard from for this long is not counted.
        max_age: how old a signal a request may be answered from (0 to 5 minutes; 0 reads
            for every request). Requests during a read share it.
        clock: the queue's clock (tests pass a :class:`~caravel.testing.ManualClock`).
    """
    if authorize is not None and not callable(authorize):
        raise ValidationError("authorize", "must be a function of the request")
    check_duration(
        "lost_after", lost_after, timedelta.resolution, timedelta.max, "must be positive"
    )
    check_max_age(max_age)
    return MetricsApp(
        QueueInspector(queue_url, clock=clock),
        authorize=authorize,
        lost_after=lost_after,
        max_age=max_age,
    )
