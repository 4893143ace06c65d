"""Cancelling and deleting one job from the dashboard: a confirmation page, then the POST of its
form (checked by the guard for the operator permission and the anti-forgery token), exactly as a
replay is confirmed and done. Nothing changes on a GET."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from caravel.jobs import CancelOutcome
from caravel.queue import DatabaseQueue
from caravel.web.pages import Pages

__all__ = ["RemovalPages"]


class RemovalPages:
    """The cancel and delete pages of one dashboard; the changes go through ``writer``."""

    def __init__(self, pages: Pages, writer: DatabaseQueue) -> None:
        self._pages = pages
        self._view = pages.view
        self._writer = writer

    async def _confirm(self, request: Request, template: str, title: str, suffix: str) -> Response:
        job = await self._pages.find_job(request, request.query_params)
        return self._view.render(
            request,
            template,
            refresh=0,
            nav="jobs",
            page_title=title,
            job=job,
            job_url=self._pages.job_url(request, job),
            action=self._view.url_builder(request)(f"/jobs/{job.job_id}/{suffix}"),
        )

    async def cancel_one_confirm(self, request: Request) -> Response:
        return await self._confirm(request, "cancel_one.html", "Cancel a job", "cancel")

    async def cancel_one(self, request: Request) -> Response:
        form: dict[str, str] = request.state.form  # read and checked by the guard
        job = await self._pages.find_job(request, form)
        outcome = await self._writer.cancel(job.job_id, job.queue, job.tenant_id)
        if outcome not in (CancelOutcome.CANCELLED, CancelOutcome.CANCELLED_RUNNING):
            return self._view.error(
                request,
                409,
                "Nothing cancelled",
                "This job had already finished (it completed, was dead-lettered or was "
                "cancelled), so nothing was done.",
            )
        return RedirectResponse(
            self._pages.job_url(request, job, notice=outcome.value), status_code=303
        )

    async def delete_one_confirm(self, request: Request) -> Response:
        return await self._confirm(request, "delete_one.html", "Delete a job", "delete")

    async def delete_one(self, request: Request) -> Response:
        form: dict[str, str] = request.state.form  # read and checked by the guard
        job = await self._pages.find_job(request, form)
        if not await self._writer.delete(job.job_id, job.queue, job.tenant_id):
            return self._view.error(
                request,
                409,
                "Nothing deleted",
                "Only a finished job (completed, dead-lettered or cancelled) can be deleted, "
                "and this one is not, so nothing was done.",
            )
        where = self._view.url_builder(request)("/jobs", {"queue": job.queue})
        return RedirectResponse(where, status_code=303)
