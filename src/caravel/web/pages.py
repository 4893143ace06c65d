"""The pages that show the queue: the overview, the job listings, one job, the workers, and
the dashboard's static files.

Every page reads through the read-only :class:`~caravel.inspector.QueueInspector` and runs
behind the guard, which has already checked the permission of its route.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TypedDict
from uuid import UUID

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from caravel.attempts import AttemptRecord
from caravel.clock import from_ms
from caravel.errors import ValidationError
from caravel.inspector import QueueInspector
from caravel.jobs import JobState, JobStatus
from caravel.store.protocol import SHOWN_STATES, QueueCounts, ThroughputBucket
from caravel.validation import check_identifier, check_queue_name
from caravel.web.assets import StaticAsset
from caravel.web.attempts_view import attempt_rows
from caravel.web.auth import principal_of
from caravel.web.charts import Series, bar_chart, sparkline
from caravel.web.filters import clamp_int, parse_filters, parse_paging, removal_query
from caravel.web.guard import Handler, Refusal
from caravel.web.link_pages import job_links
from caravel.web.presentation import (
    Renderer,
    lease_note,
    pretty_payload,
    short_id,
    span,
    timeline,
)

__all__ = ["BUCKET", "DEAD_LETTERS", "JOBS", "WINDOW", "Listing", "Pages"]

#: Throughput charts: the last hour in five-minute buckets.
WINDOW = timedelta(hours=1)
BUCKET = timedelta(minutes=5)

_WORKER_STATES: tuple[str, ...] = ("running", "lost", "stopped")

#: What the overview says after a pause or resume redirects to it.
PAUSE_NOTICES = {
    "paused": "Paused: workers claim none of its jobs until it is resumed; jobs already "
    "running finish.",
    "resumed": "Resumed: workers claim its jobs again.",
}

#: What the schedules page says after a schedule's pause or resume redirects to it.
SCHEDULE_NOTICES = {
    "paused": "Paused: every scheduler passes its slots over until it is resumed.",
    "resumed": "Resumed: schedulers enqueue its slots again, from its next slot.",
}


class _ListingQuery(TypedDict):
    """What a listing page asks :meth:`QueueInspector.list_jobs` for."""

    queue: str | None
    tenant_id: str | None
    state: JobState | None
    shown_state: str | None
    job_type: str | None
    tag: str | None
    batch_id: UUID | None
    limit: int
    offset: int
    oldest_first: bool


@dataclass(frozen=True, slots=True)
class Listing:
    """What one job listing page is: where it lives, its template and title, and the one state
    it lists (``None``: every state, with a state filter)."""

    path: str
    template: str
    nav: str
    page_title: str
    only: JobState | None = None
    #: Whether each job comes with its latest attempt record (read in the same statement).
    last_attempt: bool = False


JOBS = Listing("/jobs", "jobs.html", "jobs", "Jobs")
DEAD_LETTERS = Listing(
    "/dead-letters",
    "dead_letters.html",
    "dead",
    "Dead letters",
    only=JobState.DEAD_LETTER,
    last_attempt=True,
)


class Pages:
    """The read pages of one dashboard."""

    def __init__(
        self,
        reader: QueueInspector,
        view: Renderer,
        assets: Mapping[str, StaticAsset],
        *,
        lost_after: timedelta,
    ) -> None:
        self.reader = reader
        self.view = view
        self.lost_after = lost_after
        self._assets = assets

    async def overview(self, request: Request) -> Response:
        counts = await self.reader.queue_counts()
        flows = await self.reader.throughput(window=WINDOW, bucket=BUCKET)
        workers = await self.reader.list_workers(lost_after=self.lost_after)
        paused = {p.queue: p.paused_at for p in await self.reader.paused_queues()}
        limited = await self.reader.queue_limit_usage(keys=0)
        now_ms = self.reader.clock.now_ms()
        starts = _bucket_starts(flows, now_ms)
        names = sorted({c.queue for c in counts} | {b.queue for b in flows} | set(paused))
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
                    "paused_at": paused.get(name),
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
        totals = {key: sum(getattr(c, key) for c in counts) for key in SHOWN_STATES}
        done_all = series(None, "completed")
        dead_all = series(None, "dead_lettered")
        states = {state: sum(1 for w in workers if w.state == state) for state in _WORKER_STATES}
        return self.view.render(
            request,
            "overview.html",
            nav="overview",
            page_title="Overview",
            rows=rows,
            limited=limited,
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
            notice=PAUSE_NOTICES.get(request.query_params.get("notice", "")),
        )

    def listing(self, kind: Listing) -> Handler:
        """The page that lists jobs of ``kind``: filtered, one page at a time, newest or oldest
        first. One row more than a page is read to know whether a next page exists."""

        async def page(request: Request) -> Response:
            filters, problems = parse_filters(
                request.query_params, with_state=kind.only is None, with_batch=kind is JOBS
            )
            paging = parse_paging(request.query_params)
            where: _ListingQuery = {
                "queue": filters.queue,
                "tenant_id": filters.tenant,
                "state": kind.only,
                "shown_state": filters.state,
                "job_type": filters.job_type,
                "tag": filters.tag,
                "batch_id": filters.batch,
                "limit": paging.per_page + 1,
                "offset": paging.offset,
                "oldest_first": paging.oldest_first,
            }
            last: dict[UUID, AttemptRecord | None] = {}
            if kind.last_attempt:
                listed = await self.reader.list_jobs_with_last_attempt(**where)
                found = [job for job, _ in listed]
                last = {job.job_id: record for job, record in listed}
            else:
                found = await self.reader.list_jobs(**where)
            return self.view.render(
                request,
                kind.template,
                status=400 if problems else 200,
                nav=kind.nav,
                page_title=kind.page_title,
                filters=filters,
                paging=paging,
                jobs=found[: paging.per_page],
                last_attempts=last,
                more=len(found) > paging.per_page,
                problems=problems,
                states=SHOWN_STATES,
                path=kind.path,
                bulk_cancel=removal_query(filters, deleting=False),
                bulk_delete=removal_query(filters, deleting=True),
                notice=_removal_notice(request.query_params),
            )

        return page

    async def find_job(self, request: Request, values: Mapping[str, str]) -> JobStatus:
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
                self.view.error(
                    request,
                    404,
                    "No such job",
                    "No job has this id in this queue for this tenant. Open jobs from the "
                    "jobs table.",
                )
            )
        return found

    def job_url(self, request: Request, job: JobStatus, suffix: str = "", **more: str) -> str:
        """The job's page (or ``suffix`` below it), naming its queue and tenant, which a job id
        alone does not: a job is found only within its own queue and tenant."""
        return self.view.url_builder(request)(
            f"/jobs/{job.job_id}{suffix}", {"queue": job.queue, "tenant": job.tenant_id}, **more
        )

    async def job(self, request: Request) -> Response:
        job = await self.find_job(request, request.query_params)
        # Matched exactly as the job was: its id, queue and tenant.
        records = await self.reader.get_attempts(job.job_id, job.queue, job.tenant_id)
        principal = principal_of(request)
        payload = result = None
        if principal is not None and principal.can_see_payloads:
            text = await self.reader.get_payload(job.job_id, job.queue, job.tenant_id)
            payload = None if text is None else pretty_payload(text)
            # A result is the application's data, like the payload: the same permission.
            stored = await self.reader.get_result(job.job_id, job.queue, job.tenant_id)
            result = None if stored is None else pretty_payload(stored)
        notice = {
            "replayed": "Replayed: the job is ready again with its attempts reset, and runs as "
            "soon as a worker is free.",
            "cancelled": "Cancelled: the job will not run.",
            "cancelled_running": "Cancelled: its worker is told and cancels the handler; "
            "nothing the handler reports from now on changes the job.",
        }.get(request.query_params.get("notice", ""))
        return self.view.render(
            request,
            "job.html",
            nav="jobs",
            page_title=f"Job \u2026{short_id(job.job_id)}",
            job=job,
            links=await job_links(self.reader, job),
            timeline=timeline(job),
            attempts=attempt_rows(job, records or []),
            lease=lease_note(job, from_ms(self.reader.clock.now_ms())),
            payload=payload,
            result=result,
            notice=notice,
            replay_url=self.job_url(request, job, "/replay"),
            cancel_url=self.job_url(request, job, "/cancel"),
            delete_url=self.job_url(request, job, "/delete"),
        )

    async def workers(self, request: Request) -> Response:
        found = await self.reader.list_workers(lost_after=self.lost_after)
        states = {state: sum(1 for w in found if w.state == state) for state in _WORKER_STATES}
        return self.view.render(
            request,
            "workers.html",
            nav="workers",
            page_title="Workers",
            workers=found,
            worker_states=states,
            lost_after=span(self.lost_after.total_seconds()),
            in_flight=sum(w.in_flight for w in found),
        )

    async def schedules(self, request: Request) -> Response:
        found = await self.reader.list_schedules()
        return self.view.render(
            request,
            "schedules.html",
            nav="schedules",
            page_title="Schedules",
            schedules=found,
            notice=SCHEDULE_NOTICES.get(request.query_params.get("notice", "")),
        )

    async def static(self, request: Request) -> Response:
        asset = self._assets.get(request.path_params["name"])
        if asset is None:
            return self.view.error(request, 404, "Not found", "There is no such file.")
        return Response(
            asset.body,
            media_type=asset.media_type,
            headers={"cache-control": "public, max-age=86400", "etag": f'"{asset.version}"'},
        )

    async def not_found(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = self.view.error(request, 404, "Not found", "There is no such page.")
        await response(scope, receive, send)


def _removal_notice(values: Mapping[str, str]) -> str | None:
    """What the jobs listing says after a cancel or delete by filter redirects to it."""
    for done in ("cancelled", "deleted"):
        count = clamp_int(values.get(done), default=-1, low=0, high=10**9)
        if count >= 0:
            return f"{done.capitalize()} {count} {'job' if count == 1 else 'jobs'}."
    return None


def _bucket_starts(flows: list[ThroughputBucket], now_ms: int) -> list[int]:
    """The bucket starts of the charts: those the queue returned, or (when nothing finished in
    the window) the same alignment computed here."""
    if flows:
        return sorted({b.start for b in flows})
    size = int(BUCKET / timedelta(milliseconds=1))
    count = int(WINDOW / BUCKET)
    last = now_ms - now_ms % size
    return [last - (count - 1 - i) * size for i in range(count)]
