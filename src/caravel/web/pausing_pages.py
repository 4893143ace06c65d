"""Pausing and resuming a queue or a schedule from the dashboard: a confirmation page (GET) and
the POST of its form, which the guard checks for the operator permission and the anti-forgery
token, as it does for a replay. The queue or schedule is named by the path, and the form names
it again (so a form posted to another one's address changes nothing); a name that breaks the
naming rule, or a form that names another one, is a 400 and nothing is written.

Both pauses are the stored ones the command line sets too: every worker (or scheduler) on every
host skips the queue (or passes the schedule's slots over) until it is resumed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from caravel.errors import ValidationError
from caravel.queue import DatabaseQueue
from caravel.validation import check_queue_name, check_schedule_name
from caravel.web.presentation import Renderer

__all__ = ["PausingPages", "queue_pausing", "schedule_pausing"]


@dataclass(frozen=True, slots=True)
class _Pausable:
    """What one kind of pausable thing is called, where it lives and how it is paused."""

    kind: str  # the form field, the template's variable and the pages' noun
    param: str  # the path parameter naming it
    check: Callable[[object], str]
    template: str
    nav: str
    prefix: str  # its pages' address: ``{prefix}/{name}/pause``
    back: str  # where a change returns to
    rule: str
    pause: Callable[[DatabaseQueue, str], Awaitable[bool]]
    resume: Callable[[DatabaseQueue, str], Awaitable[bool]]


_QUEUE = _Pausable(
    kind="queue",
    param="queue",
    check=check_queue_name,
    template="queue_pause.html",
    nav="overview",
    prefix="/queues",
    back="/",
    rule="A queue name is 1 to 64 characters of lowercase letters, digits, '.', '-' or '_', "
    "and the form must name the queue of its address.",
    pause=DatabaseQueue.pause_queue,
    resume=DatabaseQueue.resume_queue,
)
_SCHEDULE = _Pausable(
    kind="schedule",
    param="name",
    check=check_schedule_name,
    template="schedule_pause.html",
    nav="schedules",
    prefix="/schedules",
    back="/schedules",
    rule="A schedule name is 1 to 64 characters of lowercase letters, digits, '.', '-' or "
    "'_', and the form must name the schedule of its address.",
    pause=DatabaseQueue.pause_schedule,
    resume=DatabaseQueue.resume_schedule,
)


class PausingPages:
    """The pause and resume pages of one kind of thing on one dashboard; changes write through
    ``writer``."""

    def __init__(self, view: Renderer, writer: DatabaseQueue, what: _Pausable) -> None:
        self._view = view
        self._writer = writer
        self._what = what

    async def pause_confirm(self, request: Request) -> Response:
        return self._confirm(request, pausing=True)

    async def resume_confirm(self, request: Request) -> Response:
        return self._confirm(request, pausing=False)

    async def pause(self, request: Request) -> Response:
        return await self._change(request, pausing=True)

    async def resume(self, request: Request) -> Response:
        return await self._change(request, pausing=False)

    def _confirm(self, request: Request, *, pausing: bool) -> Response:
        what = self._what
        name = self._name(request)
        if name is None:
            return self._bad_name(request)
        verb = "pause" if pausing else "resume"
        named: dict[str, Any] = {what.kind: name}
        return self._view.render(
            request,
            what.template,
            refresh=0,
            nav=what.nav,
            page_title=f"{verb.capitalize()} a {what.kind}",
            pausing=pausing,
            action=self._view.url_builder(request)(f"{what.prefix}/{name}/{verb}"),
            **named,
        )

    async def _change(self, request: Request, *, pausing: bool) -> Response:
        what = self._what
        name = self._name(request)
        form: dict[str, str] = request.state.form  # read and checked by the guard
        if name is None or form.get(what.kind) != name:
            return self._bad_name(request)
        await (what.pause if pausing else what.resume)(self._writer, name)
        # Already paused (or not paused) is no failure: it is as asked either way.
        notice = "paused" if pausing else "resumed"
        url = self._view.url_builder(request)(what.back, notice=notice)
        return RedirectResponse(url, status_code=303)

    def _name(self, request: Request) -> str | None:
        try:
            return self._what.check(request.path_params[self._what.param])
        except ValidationError:
            return None

    def _bad_name(self, request: Request) -> Response:
        title = f"Invalid {self._what.kind}"
        return self._view.error(request, 400, title, self._what.rule)


def queue_pausing(view: Renderer, writer: DatabaseQueue) -> PausingPages:
    return PausingPages(view, writer, _QUEUE)


def schedule_pausing(view: Renderer, writer: DatabaseQueue) -> PausingPages:
    return PausingPages(view, writer, _SCHEDULE)
