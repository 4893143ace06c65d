"""Pausing and resuming a schedule from the dashboard: a confirmation page (GET) and the POST of
its form, which the guard checks for the operator permission and the anti-forgery token, as it
does for a queue's pause. The schedule is named by the path, and the form names it again (so a
form posted to another schedule's address changes nothing); a name that is not a schedule name,
or a form that names another schedule, is a 400 and nothing is written.

The pause is the same stored one as ``caravel schedules pause``: every scheduler on every host
passes the schedule's slots over until it is resumed."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from caravel.errors import ValidationError
from caravel.queue import DatabaseQueue
from caravel.validation import check_schedule_name
from caravel.web.presentation import Renderer

__all__ = ["SchedulePausingPages"]


class SchedulePausingPages:
    """The schedule pause and resume pages of one dashboard; changes write through ``writer``."""

    def __init__(self, view: Renderer, writer: DatabaseQueue) -> None:
        self._view = view
        self._writer = writer

    async def pause_confirm(self, request: Request) -> Response:
        return self._confirm(request, pausing=True)

    async def resume_confirm(self, request: Request) -> Response:
        return self._confirm(request, pausing=False)

    async def pause(self, request: Request) -> Response:
        return await self._change(request, pausing=True)

    async def resume(self, request: Request) -> Response:
        return await self._change(request, pausing=False)

    def _confirm(self, request: Request, *, pausing: bool) -> Response:
        name = self._name(request)
        if name is None:
            return self._bad_name(request)
        verb = "pause" if pausing else "resume"
        return self._view.render(
            request,
            "schedule_pause.html",
            refresh=0,
            nav="schedules",
            page_title=f"{verb.capitalize()} a schedule",
            schedule=name,
            pausing=pausing,
            action=self._view.url_builder(request)(f"/schedules/{name}/{verb}"),
        )

    async def _change(self, request: Request, *, pausing: bool) -> Response:
        name = self._name(request)
        form: dict[str, str] = request.state.form  # read and checked by the guard
        if name is None or form.get("schedule") != name:
            return self._bad_name(request)
        if pausing:
            await self._writer.pause_schedule(name)
        else:
            await self._writer.resume_schedule(name)
        # Already paused (or not paused) is no failure: the schedule is as asked either way.
        notice = "paused" if pausing else "resumed"
        url = self._view.url_builder(request)("/schedules", notice=notice)
        return RedirectResponse(url, status_code=303)

    @staticmethod
    def _name(request: Request) -> str | None:
        try:
            return check_schedule_name(request.path_params["name"])
        except ValidationError:
            return None

    def _bad_name(self, request: Request) -> Response:
        return self._view.error(
            request,
            400,
            "Invalid schedule",
            "A schedule name is 1 to 64 characters of lowercase letters, digits, '.', '-' or "
            "'_', and the form must name the schedule of its address.",
        )
