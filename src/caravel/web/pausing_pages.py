"""Pausing and resuming a queue from the dashboard: a confirmation page (GET) and the POST of its
form, which the guard checks for the operator permission and the anti-forgery token, as it does
for a replay. The queue is named by the path, and the form names it again (so a form posted to
another queue's address changes nothing); a name that is not a queue name, or a form that names
another queue, is a 400 and nothing is written."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from caravel.errors import ValidationError
from caravel.queue import DatabaseQueue
from caravel.validation import check_queue_name
from caravel.web.presentation import Renderer

__all__ = ["PausingPages"]


class PausingPages:
    """The pause and resume pages of one dashboard; changes write through ``writer``."""

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
        queue = self._queue(request)
        if queue is None:
            return self._bad_name(request)
        verb = "pause" if pausing else "resume"
        return self._view.render(
            request,
            "queue_pause.html",
            refresh=0,
            nav="overview",
            page_title=f"{verb.capitalize()} a queue",
            queue=queue,
            pausing=pausing,
            action=self._view.url_builder(request)(f"/queues/{queue}/{verb}"),
        )

    async def _change(self, request: Request, *, pausing: bool) -> Response:
        queue = self._queue(request)
        form: dict[str, str] = request.state.form  # read and checked by the guard
        if queue is None or form.get("queue") != queue:
            return self._bad_name(request)
        if pausing:
            await self._writer.pause_queue(queue)
        else:
            await self._writer.resume_queue(queue)
        # Already paused (or not paused) is no failure: the queue is as asked either way.
        notice = "paused" if pausing else "resumed"
        url = self._view.url_builder(request)("/", notice=notice)
        return RedirectResponse(url, status_code=303)

    @staticmethod
    def _queue(request: Request) -> str | None:
        try:
            return check_queue_name(request.path_params["queue"])
        except ValidationError:
            return None

    def _bad_name(self, request: Request) -> Response:
        return self._view.error(
            request,
            400,
            "Invalid queue",
            "A queue name is 1 to 64 characters of lowercase letters, digits, '.', '-' or '_', "
            "and the form must name the queue of its address.",
        )
