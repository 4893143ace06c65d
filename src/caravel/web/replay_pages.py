"""Replaying dead letters from the dashboard: the confirmation pages, the POSTs that replay one
job or start a run over a filtered selection, and a run's progress.

Replay is always two steps: a GET shows what will happen, and only the POST of its form (checked
by the guard for permission and anti-forgery token) changes anything.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from caravel.queue import DatabaseQueue
from caravel.web.auth import principal_of
from caravel.web.filters import parse_filters
from caravel.web.pages import Pages
from caravel.web.replay import MAX_SELECTION, ReplayRuns, count_dead_letters

__all__ = ["ReplayPages"]


class ReplayPages:
    """The replay pages of one dashboard. Jobs are found, and pages rendered, as the read pages
    do; replays write through ``writer``."""

    def __init__(self, pages: Pages, writer: DatabaseQueue, replays: ReplayRuns) -> None:
        self._pages = pages
        self._reader = pages.reader
        self._view = pages.view
        self._writer = writer
        self._replays = replays

    async def replay_one_confirm(self, request: Request) -> Response:
        job = await self._pages.find_job(request, request.query_params)
        return self._view.render(
            request,
            "replay_one.html",
            refresh=0,
            nav="dead",
            page_title="Replay a dead letter",
            job=job,
            job_url=self._pages.job_url(request, job),
            action=self._view.url_builder(request)(f"/jobs/{job.job_id}/replay"),
        )

    async def replay_one(self, request: Request) -> Response:
        form: dict[str, str] = request.state.form  # read and checked by the guard
        job = await self._pages.find_job(request, form)
        if not await self._writer.replay(job.job_id, job.queue, job.tenant_id):
            return self._view.error(
                request,
                409,
                "Nothing replayed",
                "This job is no longer a dead letter (someone replayed it, or it changed), so "
                "nothing was done.",
            )
        return RedirectResponse(
            self._pages.job_url(request, job, notice="replayed"), status_code=303
        )

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
        matching = await count_dead_letters(self._reader, filters)
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
        form: dict[str, str] = request.state.form  # read and checked by the guard
        filters, problems = parse_filters(form, with_state=False)
        if problems:
            return self._view.error(request, 400, "Invalid filter", " ".join(problems))
        matching = await count_dead_letters(self._reader, filters)
        if matching == 0:
            return self._view.error(
                request, 409, "Nothing to replay", "No dead letters match these filters now."
            )
        principal = principal_of(request)
        assert principal is not None  # the guard let only an operator through
        run = self._replays.start(principal.name, filters, matching)
        return RedirectResponse(
            self._view.url_builder(request)(f"/replays/{run.id}"), status_code=303
        )

    async def replay_progress(self, request: Request) -> Response:
        run = self._replays.get(request.path_params["run_id"])
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
