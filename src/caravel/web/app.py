"""The dashboard application: every route and its permission, and the ASGI entry that puts
the pieces together.

:class:`Dashboard` is a plain ASGI application. Run it on its own (``caravel dashboard``) or
mount it inside any ASGI application; it reads through a read-only connection (to a standby,
given ``read_url``) and writes, always to the queue's own database, only to replay dead
letters, to cancel, delete and prune jobs, to cancel workflows, to pause or resume queues and
schedules, and to set or clear queues' limits and rates. Every route is listed in
:data:`ROUTES` with the permission it needs, and one guard (:mod:`caravel.web.guard`) checks
that permission (and, for a POST, the anti-forgery token) before any page
(:mod:`caravel.web.pages`, :mod:`caravel.web.replay_pages`, :mod:`caravel.web.bulk_pages`,
...) runs. Every answer passes :class:`~caravel.web.security.SecurityHeaders`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

from starlette.requests import Request
from starlette.routing import Route, Router
from starlette.types import Receive, Scope, Send

from caravel.clock import Clock
from caravel.errors import ValidationError
from caravel.inspector import QueueInspector
from caravel.queue import DatabaseQueue
from caravel.registry import JobRegistry
from caravel.validation import check_duration, check_int
from caravel.web.assets import load_assets
from caravel.web.auth import Authorize, remember_principal
from caravel.web.bulk_pages import BulkPages
from caravel.web.csrf import CsrfSigner
from caravel.web.guard import Guard, Handler, Need, Refusal
from caravel.web.lifespan import serve_lifespan
from caravel.web.limit_pages import LimitPages
from caravel.web.link_pages import LinkPages
from caravel.web.metrics import MetricsEndpoint
from caravel.web.pages import DEAD_LETTERS, JOBS, Pages
from caravel.web.pausing_pages import queue_pausing, schedule_pausing
from caravel.web.presentation import Renderer
from caravel.web.prune_pages import PrunePages
from caravel.web.removal_pages import RemovalPages
from caravel.web.replay import ReplayRuns
from caravel.web.replay_pages import ReplayPages
from caravel.web.security import SecurityHeaders
from caravel.web.shared_signal import MAX_AGE, check_max_age
from caravel.web.workflow_pages import WorkflowPages

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = ["ROUTES", "Dashboard", "RouteSpec", "dashboard"]


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
    # Before "/jobs/{job_id}", which would otherwise take "cancel" and "delete" for job ids.
    RouteSpec("GET", "/jobs/cancel", "cancel_matching_confirm", "operate"),
    RouteSpec("POST", "/jobs/cancel", "cancel_matching", "operate"),
    RouteSpec("GET", "/jobs/delete", "delete_matching_confirm", "operate"),
    RouteSpec("POST", "/jobs/delete", "delete_matching", "operate"),
    RouteSpec("GET", "/jobs/{job_id}", "job", "read"),
    RouteSpec("GET", "/jobs/{job_id}/replay", "replay_one_confirm", "operate"),
    RouteSpec("POST", "/jobs/{job_id}/replay", "replay_one", "operate"),
    RouteSpec("GET", "/jobs/{job_id}/cancel", "cancel_one_confirm", "operate"),
    RouteSpec("POST", "/jobs/{job_id}/cancel", "cancel_one", "operate"),
    RouteSpec("GET", "/jobs/{job_id}/delete", "delete_one_confirm", "operate"),
    RouteSpec("POST", "/jobs/{job_id}/delete", "delete_one", "operate"),
    RouteSpec("GET", "/dead-letters", "dead_letters", "read"),
    RouteSpec("GET", "/dead-letters/replay", "replay_selection_confirm", "operate"),
    RouteSpec("POST", "/dead-letters/replay", "replay_selection", "operate"),
    RouteSpec("GET", "/replays/{run_id}", "replay_progress", "operate"),
    RouteSpec("GET", "/prune", "prune_confirm", "operate"),
    RouteSpec("POST", "/prune", "prune", "operate"),
    RouteSpec("GET", "/queues/{queue}/pause", "pause_confirm", "operate"),
    RouteSpec("POST", "/queues/{queue}/pause", "pause", "operate"),
    RouteSpec("GET", "/queues/{queue}/resume", "resume_confirm", "operate"),
    RouteSpec("POST", "/queues/{queue}/resume", "resume", "operate"),
    RouteSpec("GET", "/queues/{queue}/limits", "queue_limits", "read"),
    RouteSpec("POST", "/queues/{queue}/limits", "queue_limits_set", "operate"),
    RouteSpec("POST", "/queues/{queue}/limits/rate", "queue_rate_set", "operate"),
    RouteSpec("POST", "/queues/{queue}/limits/clear", "queue_limits_clear", "operate"),
    RouteSpec("GET", "/workers", "workers", "read"),
    RouteSpec("GET", "/schedules", "schedules", "read"),
    RouteSpec("GET", "/schedules/{name}/pause", "schedule_pause_confirm", "operate"),
    RouteSpec("POST", "/schedules/{name}/pause", "schedule_pause", "operate"),
    RouteSpec("GET", "/schedules/{name}/resume", "schedule_resume_confirm", "operate"),
    RouteSpec("POST", "/schedules/{name}/resume", "schedule_resume", "operate"),
    RouteSpec("GET", "/batches", "batches", "read"),
    RouteSpec("GET", "/batches/{batch_id}", "batch", "read"),
    RouteSpec("GET", "/workflows", "workflows", "read"),
    RouteSpec("GET", "/workflows/{workflow_id}", "workflow", "read"),
    RouteSpec("GET", "/workflows/{workflow_id}/cancel", "workflow_cancel_confirm", "operate"),
    RouteSpec("POST", "/workflows/{workflow_id}/cancel", "workflow_cancel", "operate"),
    # The autoscaling signal (JSON or Prometheus text), behind the same access control.
    RouteSpec("GET", "/metrics", "metrics", "read"),
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
        metrics_max_age: timedelta = MAX_AGE,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.title = title
        self.refresh_seconds = refresh_seconds
        self.lost_after = lost_after
        self.replays = ReplayRuns(reader, writer)
        self._signer = CsrfSigner(csrf_secret)
        assets = load_assets()
        self._view = Renderer(
            title=title,
            refresh_seconds=refresh_seconds,
            signer=self._signer,
            clock=reader.clock,
            assets=assets,
        )
        self._guard = Guard(authorize, self._signer, self._view)
        pages = Pages(reader, self._view, assets, lost_after=lost_after)
        replay = ReplayPages(pages, writer, self.replays)
        pruning = PrunePages(self._view, writer)
        pausing = queue_pausing(self._view, writer)
        schedules = schedule_pausing(self._view, writer)
        limits = LimitPages(self._view, reader, writer)
        removal = RemovalPages(pages, writer)
        bulk = BulkPages(self._view, writer)
        links = LinkPages(reader, self._view)
        workflows = WorkflowPages(reader, self._view, writer)
        handlers: dict[str, Handler] = {
            "overview": pages.overview,
            "jobs": pages.listing(JOBS),
            "cancel_matching_confirm": bulk.cancel_matching_confirm,
            "cancel_matching": bulk.cancel_matching,
            "delete_matching_confirm": bulk.delete_matching_confirm,
            "delete_matching": bulk.delete_matching,
            "job": pages.job,
            "replay_one_confirm": replay.replay_one_confirm,
            "replay_one": replay.replay_one,
            "cancel_one_confirm": removal.cancel_one_confirm,
            "cancel_one": removal.cancel_one,
            "delete_one_confirm": removal.delete_one_confirm,
            "delete_one": removal.delete_one,
            "dead_letters": pages.listing(DEAD_LETTERS),
            "replay_selection_confirm": replay.replay_selection_confirm,
            "replay_selection": replay.replay_selection,
            "replay_progress": replay.replay_progress,
            "prune_confirm": pruning.prune_confirm,
            "prune": pruning.prune,
            "pause_confirm": pausing.pause_confirm,
            "pause": pausing.pause,
            "resume_confirm": pausing.resume_confirm,
            "resume": pausing.resume,
            "queue_limits": limits.show,
            "queue_limits_set": limits.set,
            "queue_rate_set": limits.set_rate,
            "queue_limits_clear": limits.clear,
            "workers": pages.workers,
            "schedules": pages.schedules,
            "schedule_pause_confirm": schedules.pause_confirm,
            "schedule_pause": schedules.pause,
            "schedule_resume_confirm": schedules.resume_confirm,
            "schedule_resume": schedules.resume,
            "batches": links.batches,
            "batch": links.batch,
            "workflows": workflows.workflows,
            "workflow": workflows.workflow,
            "workflow_cancel_confirm": workflows.cancel_confirm,
            "workflow_cancel": workflows.cancel,
            "metrics": MetricsEndpoint(reader, lost_after=lost_after, max_age=metrics_max_age),
            "static": pages.static,
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
            default=pages.not_found,
        )
        self._http = SecurityHeaders(self._serve)

    # ----- ASGI --------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, self.close)
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

    async def close(self) -> None:
        """Stop replays in progress and release the database connections."""
        await self.replays.close()
        await self.reader.close()
        await self.writer.close()


def dashboard(
    queue_url: str | sa.URL,
    *,
    read_url: str | sa.URL | None = None,
    authorize: Authorize | None = None,
    title: str = "Caravel",
    refresh_seconds: int = 5,
    csrf_secret: bytes | None = None,
    lost_after: timedelta = timedelta(seconds=60),
    metrics_max_age: timedelta = MAX_AGE,
    clock: Clock | None = None,
) -> Dashboard:
    """The operations dashboard for the queue at ``queue_url``, as an ASGI application.

    Args:
        queue_url: the queue database (``postgresql://...`` or ``sqlite:///...``), migrated.
            Pages read through a read-only connection; every change (replay, cancel, delete,
            prune, pause, limits) writes through a second one.
        read_url: where the pages read from instead, such as a streaming standby of
            ``queue_url``'s database; they show it as far as it has replayed. Opened read-only,
            so nothing is ever written there. Changes, and the counts their confirmation pages
            preview, still go to ``queue_url``.
        authorize: ``authorize(request)`` returns the :class:`~caravel.web.Principal` making
            the request, or ``None`` when it is anonymous; it may be ``async``. Without it, the
            dashboard answers only requests made on this machine to a loopback address, and
            refuses every other request, saying why.
        title: shown in the header and the browser tab.
        refresh_seconds: how often open pages update themselves (0 turns it off; at most 3600).
        csrf_secret: the key of the anti-forgery tokens (at least 16 bytes). Random per process
            by default; give every process behind one address the same secret.
        lost_after: a worker whose heartbeat is older than this is shown as lost.
        metrics_max_age: how old a signal ``/metrics`` may answer from (0 to 5 minutes; 0
            reads for every request).
        clock: the queue's clock (tests pass a :class:`~caravel.testing.ManualClock`).
    """
    check_int("refresh_seconds", refresh_seconds, 0, 3600)
    if authorize is not None and not callable(authorize):
        raise ValidationError("authorize", "must be a function of the request")
    check_duration(
        "lost_after", lost_after, timedelta.resolution, timedelta.max, "must be positive"
    )
    check_max_age(metrics_max_age, "metrics_max_age")
    registry = JobRegistry()  # replay and reads need no handlers
    reader = QueueInspector(queue_url if read_url is None else read_url, clock=clock)
    writer = DatabaseQueue(queue_url, registry, clock=reader.clock)
    return Dashboard(
        reader,
        writer,
        authorize=authorize,
        title=title,
        refresh_seconds=refresh_seconds,
        csrf_secret=csrf_secret,
        lost_after=lost_after,
        metrics_max_age=metrics_max_age,
    )
