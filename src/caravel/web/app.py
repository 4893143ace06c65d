"""The dashboard application: every route, its permission, and how pages are rendered.

:class:`Dashboard` is a plain ASGI application. Run it on its own (``caravel dashboard``) or
mount it inside any ASGI application; it reads through a read-only connection and writes only
to replay dead letters. Every route is listed in :data:`ROUTES` with the permission it needs,
and one guard checks that permission (and, for a POST, the anti-forgery token) before any
handler runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal
from uuid import UUID

import sqlalchemy as sa
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route, Router
from starlette.types import Receive, Scope, Send

from caravel.clock import Clock, from_ms
from caravel.errors import ValidationError
from caravel.inspector import QueueInspector
from caravel.jobs import JobState, JobStatus
from caravel.queue import DatabaseQueue
from caravel.registry import JobRegistry
from caravel.store.protocol import QueueCounts, ThroughputBucket
from caravel.validation import check_identifier, check_queue_name
from caravel.web.assets import load_assets
from caravel.web.auth import (
    Authorize,
    principal_of,
    remember_principal,
)
from caravel.web.charts import Series, bar_chart, sparkline
from caravel.web.csrf import CsrfSigner
from caravel.web.filters import (
    Filters,
    Paging,
    parse_filters,
    parse_paging,
)
from caravel.web.guard import Guard, Need, Refusal
from caravel.web.presentation import (
    Renderer,
    lease_note,
    pretty_payload,
    short_id,
    span,
    timeline,
)
from caravel.web.replay import MAX_SELECTION, ReplayRuns, count_dead_letters
from caravel.web.security import SecurityHeaders

__all__ = ["ROUTES", "Dashboard", "RouteSpec", "dashboard"]

#: Throughput charts: the last hour in five-minute buckets.
WINDOW = timedelta(hours=1)
BUCKET = timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """One route: its method, path, name, and the permission it needs (``public``, ``read`` =
    :attr:`Principal.can_read`, ``operate`` = :attr:`Principal.can_read` and
    :attr:`Principal.can_operate`). Every POST also needs a valid anti-forgery token."""

    method: Literal["GET", "POST"]
    path: str
    name: str
    needs: Need


#: Every route of the dashboard. A test walks this table for every kind of user.
ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec("GET", "/", "overview", "read"),
    RouteSpec("GET", "/jobs", "jobs", "read"),
    RouteSpec("GET", "/jobs/{job_id}", "job", "read"),
    RouteSpec("GET", "/jobs/{job_id}/replay", "replay_one_confirm", "operate"),
    RouteSpec("POST", "/jobs/{job_id}/replay", "replay_one", "operate"),
    RouteSpec("GET", "/dead-letters", "dead_letters", "read"),
    RouteSpec("GET", "/dead-letters/replay", "replay_selection_confirm", "operate"),
    RouteSpec("POST", "/dead-letters/replay", "replay_selection", "operate"),
    RouteSpec("GET", "/replays/{run_id}", "replay_progress", "operate"),
    RouteSpec("GET", "/workers", "workers", "read"),
    RouteSpec("GET", "/static/{name}", "static", "public"),
)


class Dashboard:
    """The operations dashboard over one queue database, as an ASGI application.

    Built by :func:`dashboard`. When it runs on its own, the server's lifespan closes it; when
    it is mounted inside another application (whose lifespan does not reach mounted apps), call
    :meth:`close` when that application stops.
    """

    def __init__(
        self,
        reader: QueueInspector,
        writer: DatabaseQueue,
        *,
        authorize: Authorize | None,
        title: str,
        refresh_seconds: int,
        csrf_secret: bytes | None,
        lost_after: timedelta,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.title = title
        self.refresh_seconds = refresh_seconds
        self.lost_after = lost_after
        self.replays = ReplayRuns(reader, writer)
        self._signer = CsrfSigner(csrf_secret)
        self._static = load_assets()
        self._view = Renderer(
            title=title,
            refresh_seconds=refresh_seconds,
            signer=self._signer,
            clock=reader.clock,
            assets=self._static,
        )
        self._guard = Guard(authorize, self._signer, self._view)
        handlers: dict[str, Callable[[Request], Awaitable[Response]]] = {
            "overview": self.overview,
            "jobs": self.jobs,
            "job": self.job,
            "replay_one_confirm": self.replay_one_confirm,
            "replay_one": self.replay_one,
            "dead_letters": self.dead_letters,
            "replay_selection_confirm": self.replay_selection_confirm,
            "replay_selection": self.replay_selection,
            "replay_progress": self.replay_progress,
            "workers": self.workers,
            "static": self.static,
        }
        self.router = Router(
            routes=[
                Route(
                    spec.path,
                    self._guard.protect(spec.needs, spec.method, handlers[spec.name]),
                    methods=[spec.method],
                    name=spec.name,
                )
                for spec in ROUTES
            ],
            default=self._not_found,
        )
        self._http = SecurityHeaders(self._serve)

    # ----- ASGI --------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        await self._http(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            principal = await self._guard.identify(Request(scope, receive))
        except Refusal as refusal:
            await refusal.response(scope, receive, send)
            return
        remember_principal(scope, principal)
        await self.router(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def close(self) -> None:
        """Stop replays in progress and release the database connections."""
        await self.replays.close()
        await self.reader.close()
        await self.writer.close()

    async def _not_found(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = self._view.error(request, 404, "Not found", "There is no such page.")
        await response(scope, receive, send)

    async def overview(self, request: Request) -> Response:
        counts = await self.reader.queue_counts()
        flows = await self.reader.throughput(window=WINDOW, bucket=BUCKET)
        workers = await self.reader.list_workers(lost_after=self.lost_after)
        now_ms = self.reader.clock.now_ms()
        starts = _bucket_starts(flows, now_ms)
        names = sorted({c.queue for c in counts} | {b.queue for b in flows})
        by_queue = {c.queue: c for c in counts}
        flow = {(b.queue, b.start): b for b in flows}
        minutes = int(BUCKET / timedelta(minutes=1))
        start_times = [from_ms(s) for s in starts]

        def series(queue: str | None, attr: str) -> Series:
            values = [
                sum(
                    getattr(flow[(name, s)], attr)
                    for name in ([queue] if queue is not None else names)
                    if (name, s) in flow
                )
                for s in starts
            ]
            return Series(start_times, values, minutes)

        rows = []
        for name in names:
            c = by_queue.get(name, QueueCounts(name, 0, 0, 0, 0, 0, 0))
            oldest = None if c.oldest_ready_due_ms is None else (now_ms - c.oldest_ready_due_ms)
            rows.append(
                {
                    "counts": c,
                    "oldest_wait": None if oldest is None else span(oldest / 1000),
                    "spark_done": sparkline(
                        series(name, "completed"),
                        label=f"{name} completed",
                        noun="completed",
                        tone="ok",
                    ),
                    "spark_dead": sparkline(
                        series(name, "dead_lettered"),
                        label=f"{name} dead-lettered",
                        noun="dead-lettered",
                        tone="bad",
                    ),
                }
            )
        totals = {
            key: sum(getattr(c, key) for c in counts)
            for key in ("ready", "delayed", "running", "expired", "dead_letter", "completed")
        }
        done_all = series(None, "completed")
        dead_all = series(None, "dead_lettered")
        states = {state: sum(1 for w in workers if w.state == state) for state in _WORKER_STATES}
        return self._view.render(
            request,
            "overview.html",
            nav="overview",
            page_title="Overview",
            rows=rows,
            totals=totals,
            chart_done=bar_chart(
                done_all, ident="chart-done", title="Completed", noun="completed", tone="ok"
            ),
            chart_dead=bar_chart(
                dead_all,
                ident="chart-dead",
                title="Dead-lettered",
                noun="dead-lettered",
                tone="bad",
            ),
            done_total=done_all.total,
            dead_total=dead_all.total,
            worker_states=states,
            bucket_minutes=minutes,
        )

    async def _listing(
        self, request: Request, *, dead_only: bool
    ) -> tuple[Filters, Paging, list[JobStatus], bool, list[str]]:
        filters, problems = parse_filters(request.query_params, with_state=not dead_only)
        paging = parse_paging(request.query_params)
        found = await self.reader.list_jobs(
            queue=filters.queue,
            tenant_id=filters.tenant,
            state=JobState.DEAD_LETTER if dead_only else filters.state,
            job_type=filters.job_type,
            limit=paging.per_page + 1,
            offset=paging.offset,
            oldest_first=paging.oldest_first,
        )
        return filters, paging, found[: paging.per_page], len(found) > paging.per_page, problems

    async def jobs(self, request: Request) -> Response:
        filters, paging, found, more, problems = await self._listing(request, dead_only=False)
        return self._view.render(
            request,
            "jobs.html",
            status=400 if problems else 200,
            nav="jobs",
            page_title="Jobs",
            filters=filters,
            paging=paging,
            jobs=found,
            more=more,
            problems=problems,
            states=[s.value for s in JobState],
            path="/jobs",
        )

    async def dead_letters(self, request: Request) -> Response:
        filters, paging, found, more, problems = await self._listing(request, dead_only=True)
        return self._view.render(
            request,
            "dead_letters.html",
            status=400 if problems else 200,
            nav="dead",
            page_title="Dead letters",
            filters=filters,
            paging=paging,
            jobs=found,
            more=more,
            problems=problems,
            path="/dead-letters",
        )

    async def _find_job(self, request: Request, values: Mapping[str, str]) -> JobStatus:
        """The job named by the path's id and the given queue and tenant, or a 404 page."""
        found = None
        try:
            job_id = UUID(request.path_params["job_id"])
            queue = check_queue_name(values.get("queue", ""))
            tenant = check_identifier(values.get("tenant", ""), "tenant_id")
        except (ValueError, ValidationError):
            pass
        else:
            found = await self.reader.get_status(job_id, queue, tenant)
        if found is None:
            raise Refusal(
                self._view.error(
                    request,
                    404,
                    "No such job",
                    "No job has this id in this queue for this tenant. Open jobs from the "
                    "jobs table.",
                )
            )
        return found

    def _job_url(self, request: Request, job: JobStatus, suffix: str = "", **more: str) -> str:
        return self._view.url_builder(request)(
            f"/jobs/{job.job_id}{suffix}", {"queue": job.queue, "tenant": job.tenant_id}, **more
        )

    async def job(self, request: Request) -> Response:
        job = await self._find_job(request, request.query_params)
        principal = principal_of(request)
        payload = None
        if principal is not None and principal.can_see_payloads:
            text = await self.reader.get_payload(job.job_id, job.queue, job.tenant_id)
            payload = None if text is None else pretty_payload(text)
        notice = {
            "replayed": "Replayed: the job is ready again with its attempts reset, and runs as "
            "soon as a worker is free."
        }.get(request.query_params.get("notice", ""))
        return self._view.render(
            request,
            "job.html",
            nav="jobs",
            page_title=f"Job \u2026{short_id(job.job_id)}",
            job=job,
            timeline=timeline(job),
            lease=lease_note(job, from_ms(self.reader.clock.now_ms())),
            payload=payload,
            notice=notice,
            replay_url=self._job_url(request, job, "/replay"),
        )

    async def replay_one_confirm(self, request: Request) -> Response:
        job = await self._find_job(request, request.query_params)
        return self._view.render(
            request,
            "replay_one.html",
            refresh=0,
            nav="dead",
            page_title="Replay a dead letter",
            job=job,
            job_url=self._job_url(request, job),
            action=self._view.url_builder(request)(f"/jobs/{job.job_id}/replay"),
        )

    async def replay_one(self, request: Request) -> Response:
        form: dict[str, str] = request.state.form
        job = await self._find_job(request, form)
        if not await self.writer.replay(job.job_id, job.queue, job.tenant_id):
            return self._view.error(
                request,
                409,
                "Nothing replayed",
                "This job is no longer a dead letter (someone replayed it, or it changed), so "
                "nothing was done.",
            )
        return RedirectResponse(self._job_url(request, job, notice="replayed"), status_code=303)

    async def replay_selection_confirm(self, request: Request) -> Response:
        filters, problems = parse_filters(request.query_params, with_state=False)
        if problems:
            return self._view.render(
                request,
                "error.html",
                status=400,
                refresh=0,
                nav="dead",
                page_title="Invalid filter",
                message=" ".join(problems),
            )
        matching = await count_dead_letters(self.reader, filters)
        return self._view.render(
            request,
            "replay_selection.html",
            refresh=0,
            nav="dead",
            page_title="Replay dead letters",
            filters=filters,
            matching=matching,
            capped=matching >= MAX_SELECTION,
            action=self._view.url_builder(request)("/dead-letters/replay"),
        )

    async def replay_selection(self, request: Request) -> Response:
        form: dict[str, str] = request.state.form
        filters, problems = parse_filters(form, with_state=False)
        if problems:
            return self._view.error(request, 400, "Invalid filter", " ".join(problems))
        matching = await count_dead_letters(self.reader, filters)
        if matching == 0:
            return self._view.error(
                request, 409, "Nothing to replay", "No dead letters match these filters now."
            )
        principal = principal_of(request)
        assert principal is not None
        run = self.replays.start(principal.name, filters, matching)
        return RedirectResponse(
            self._view.url_builder(request)(f"/replays/{run.id}"), status_code=303
        )

    async def replay_progress(self, request: Request) -> Response:
        run = self.replays.get(request.path_params["run_id"])
        if run is None:
            return self._view.error(
                request,
                404,
                "No such replay",
                "This replay is unknown here: it may have run in another process, or be too "
                "old to remember.",
            )
        return self._view.render(
            request,
            "replay_progress.html",
            refresh=0 if run.finished else 1,
            nav="dead",
            page_title="Replaying dead letters",
            run=run,
        )

    async def workers(self, request: Request) -> Response:
        found = await self.reader.list_workers(lost_after=self.lost_after)
        states = {state: sum(1 for w in found if w.state == state) for state in _WORKER_STATES}
        return self._view.render(
            request,
            "workers.html",
            nav="workers",
            page_title="Workers",
            workers=found,
            worker_states=states,
            lost_after=span(self.lost_after.total_seconds()),
            in_flight=sum(w.in_flight for w in found),
        )

    async def static(self, request: Request) -> Response:
        asset = self._static.get(request.path_params["name"])
        if asset is None:
            return self._view.error(request, 404, "Not found", "There is no such file.")
        return Response(
            asset.body,
            media_type=asset.media_type,
            headers={"cache-control": "public, max-age=86400", "etag": f'"{asset.version}"'},
        )


_WORKER_STATES: tuple[str, ...] = ("running", "lost", "stopped")


def _bucket_starts(flows: list[ThroughputBucket], now_ms: int) -> list[int]:
    """The bucket starts of the charts: those the queue returned, or (when nothing finished in
    the window) the same alignment computed here."""
    if flows:
        return sorted({b.start for b in flows})
    size = int(BUCKET / timedelta(milliseconds=1))
    count = int(WINDOW / BUCKET)
    last = now_ms - now_ms % size
    return [last - (count - 1 - i) * size for i in range(count)]


def dashboard(
    queue_url: str | sa.URL,
    *,
    authorize: Authorize | None = None,
    title: str = "Caravel",
    refresh_seconds: int = 5,
    csrf_secret: bytes | None = None,
    lost_after: timedelta = timedelta(seconds=60),
    clock: Clock | None = None,
) -> Dashboard:
    """The operations dashboard for the queue at ``queue_url``, as an ASGI application.

    Args:
        queue_url: the queue database (``postgresql://...`` or ``sqlite:///...``), migrated.
            Pages read through a read-only connection; replays write through a second one.
        authorize: ``authorize(request)`` returns the :class:`~caravel.web.Principal` making
            the request, or ``None`` when it is anonymous; it may be ``async``. Without it, the
            dashboard answers only requests made on this machine to a loopback address, and
            refuses every other request, saying why.
        title: shown in the header and the browser tab.
        refresh_seconds: how often open pages update themselves (0 turns it off; at most 3600).
        csrf_secret: the key of the anti-forgery tokens (at least 16 bytes). Random per process
            by default; give every process behind one address the same secret.
        lost_after: a worker whose heartbeat is older than this is shown as lost.
        clock: the queue's clock (tests pass a :class:`~caravel.testing.ManualClock`).
    """
    if isinstance(refresh_seconds, bool) or not isinstance(refresh_seconds, int):
        raise ValidationError("refresh_seconds", "must be an integer from 0 to 3600")
    if not 0 <= refresh_seconds <= 3600:
        raise ValidationError("refresh_seconds", "must be an integer from 0 to 3600")
    if authorize is not None and not callable(authorize):
        raise ValidationError("authorize", "must be a function of the request")
    if lost_after <= timedelta(0):
        raise ValidationError("lost_after", "must be positive")
    registry = JobRegistry()  # replay and reads need no handlers
    reader = QueueInspector(queue_url, clock=clock)
    writer = DatabaseQueue(queue_url, registry, clock=reader.clock)
    return Dashboard(
        reader,
        writer,
        authorize=authorize,
        title=title,
        refresh_seconds=refresh_seconds,
        csrf_secret=csrf_secret,
        lost_after=lost_after,
    )
