"""The workflow pages: the workflows listing, one workflow with its graph and its steps, and the
cancel of a workflow (a confirmation page, then the POST of its form, which the guard checks for
the operator permission and the anti-forgery token).

They read through the read-only :class:`~caravel.inspector.QueueInspector`, for every tenant,
and show no payload and no result. Replaying a failed step is the job replay the dead letters
use: each failed step links to its job's replay confirmation.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from caravel.errors import ValidationError
from caravel.inspector import QueueInspector
from caravel.lookup import parse_job_id
from caravel.queue import DatabaseQueue
from caravel.validation import check_identifier
from caravel.web.filters import MAX_PAGE, PER_PAGE_CHOICES, clamp_int
from caravel.web.guard import Refusal
from caravel.web.presentation import Renderer, short_id
from caravel.web.workflow_graph import MAX_DRAWN, graph_svg, node_anchor
from caravel.workflows import WorkflowStatus
from caravel.workflows.nodes import counts_words, node_words, shown_counts, step_nodes

__all__ = ["FAILED_SHOWN", "WorkflowPages", "WorkflowPaging"]

#: The failed members a group's row lists (each with its replay link); the rest are counted.
FAILED_SHOWN = 10

#: The states in which a workflow has something left to cancel.
_LIVE = ("running", "blocked")


@dataclass(frozen=True, slots=True)
class WorkflowPaging:
    """One page of the workflows listing, newest first, of one tenant or every tenant."""

    page: int = 1
    per_page: int = 50
    tenant: str | None = None

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.per_page


class WorkflowPages:
    """The workflow pages of one dashboard; a cancel writes through ``writer``."""

    def __init__(self, reader: QueueInspector, view: Renderer, writer: DatabaseQueue) -> None:
        self.reader = reader
        self.view = view
        self.writer = writer

    async def workflows(self, request: Request) -> Response:
        values = request.query_params
        tenant: str | None = None
        problems = []
        if values.get("tenant"):
            try:
                tenant = check_identifier(values["tenant"], "tenant_id")
            except ValidationError as exc:
                problems.append(f"Tenant: {exc.rule}.")
        paging = WorkflowPaging(
            page=clamp_int(values.get("page"), default=1, low=1, high=MAX_PAGE),
            per_page=clamp_int(
                values.get("per_page"),
                default=50,
                low=PER_PAGE_CHOICES[0],
                high=PER_PAGE_CHOICES[-1],
            ),
            tenant=tenant,
        )
        # One row more than a page tells whether a next page exists.
        found = await self.reader.list_workflows(
            paging.per_page + 1, paging.offset, tenant_id=tenant
        )
        return self.view.render(
            request,
            "workflows.html",
            nav="workflows",
            page_title="Workflows",
            workflows=[(w, shown_counts(w.counts)) for w in found[: paging.per_page]],
            paging=paging,
            more=len(found) > paging.per_page,
            problems=problems,
        )

    async def _find(self, request: Request) -> WorkflowStatus:
        found = None
        try:
            workflow_id = parse_job_id(request.path_params["workflow_id"], "workflow_id")
        except ValidationError:
            pass
        else:
            found = await self.reader.get_workflow(workflow_id)
        if found is None:
            raise Refusal(
                self.view.error(
                    request,
                    404,
                    "No such workflow",
                    "No workflow has this id. Open workflows from the workflows list.",
                )
            )
        return found

    def _url(self, request: Request, workflow_id: UUID, suffix: str = "", **more: str) -> str:
        return self.view.url_builder(request)(f"/workflows/{workflow_id}{suffix}", **more)

    async def workflow(self, request: Request) -> Response:
        status = await self._find(request)
        nodes = step_nodes(status)
        notice = None
        cancelled = clamp_int(request.query_params.get("cancelled"), default=-1, low=0, high=10**9)
        if cancelled >= 0:
            notice = (
                f"Cancelled {cancelled} {'step' if cancelled == 1 else 'steps'}: what had not "
                "started will not run, and the workers of running steps cancel their handlers."
            )
        return self.view.render(
            request,
            "workflow.html",
            nav="workflows",
            page_title=f"Workflow \u2026{short_id(status.id)}",
            workflow=status,
            nodes=nodes,
            graph=graph_svg(nodes),
            too_many=len(nodes) > MAX_DRAWN,
            max_drawn=MAX_DRAWN,
            node_words=node_words,
            anchor=node_anchor,
            failed_shown=FAILED_SHOWN,
            live=status.state in _LIVE,
            notice=notice,
            counts_text=counts_words(status.counts),
            cancel_url=self._url(request, status.id, "/cancel"),
        )

    async def cancel_confirm(self, request: Request) -> Response:
        status = await self._find(request)
        return self.view.render(
            request,
            "workflow_cancel.html",
            refresh=0,
            nav="workflows",
            page_title="Cancel a workflow",
            workflow=status,
            live=status.state in _LIVE,
            workflow_url=self._url(request, status.id),
            action=self._url(request, status.id, "/cancel"),
        )

    async def cancel(self, request: Request) -> Response:
        status = await self._find(request)
        # The workflow's own tenant, as found: never one typed into the form.
        changed = await self.writer.cancel_workflow(status.id, tenant_id=status.tenant_id)
        if changed == 0:
            return self.view.error(
                request,
                409,
                "Nothing cancelled",
                "Every step of this workflow had already finished (completed, dead-lettered or "
                "cancelled), so nothing was done.",
            )
        return RedirectResponse(
            self._url(request, status.id, cancelled=str(changed)), status_code=303
        )
