"""The pages of chains and batches: the batches listing, one batch, and what a job's page says
of the chain or batch it belongs to.

They read through the read-only :class:`~caravel.inspector.QueueInspector`, for every tenant
(an operator's view), and show no payload and no result: only a batch's counts and each
chain step's state and link (a step's own page shows its result to those allowed to see it).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from caravel.batches import BatchStatus
from caravel.chains import ChainStatus
from caravel.errors import ValidationError
from caravel.inspector import QueueInspector
from caravel.jobs import JobStatus
from caravel.lookup import parse_job_id
from caravel.web.filters import MAX_PAGE, PER_PAGE_CHOICES, clamp_int
from caravel.web.guard import Refusal
from caravel.web.presentation import Renderer, short_id

__all__ = ["BatchPaging", "JobLinks", "LinkPages", "job_links"]


@dataclass(frozen=True, slots=True)
class BatchPaging:
    """One page of the batches listing, newest first."""

    page: int = 1
    per_page: int = 50

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.per_page


@dataclass(frozen=True, slots=True)
class JobLinks:
    """What a job's page shows of its links: the chain it is a step of (with every step, in
    order) and the batch it is a member of. Either is ``None`` when the job has none (or it
    was deleted since)."""

    chain: ChainStatus | None
    batch: BatchStatus | None


class LinkPages:
    """The chain and batch pages of one dashboard."""

    def __init__(self, reader: QueueInspector, view: Renderer) -> None:
        self.reader = reader
        self.view = view

    async def batches(self, request: Request) -> Response:
        values = request.query_params
        paging = BatchPaging(
            page=clamp_int(values.get("page"), default=1, low=1, high=MAX_PAGE),
            per_page=clamp_int(
                values.get("per_page"),
                default=50,
                low=PER_PAGE_CHOICES[0],
                high=PER_PAGE_CHOICES[-1],
            ),
        )
        # One row more than a page tells whether a next page exists.
        found = await self.reader.list_batches(paging.per_page + 1, paging.offset)
        return self.view.render(
            request,
            "batches.html",
            nav="batches",
            page_title="Batches",
            batches=found[: paging.per_page],
            paging=paging,
            more=len(found) > paging.per_page,
        )

    async def batch(self, request: Request) -> Response:
        batch = None
        try:
            batch_id = parse_job_id(request.path_params["batch_id"], "batch_id")
        except ValidationError:
            pass
        else:
            batch = await self.reader.get_batch(batch_id)
        if batch is None:
            raise Refusal(
                self.view.error(
                    request,
                    404,
                    "No such batch",
                    "No batch has this id. Open batches from the batches list.",
                )
            )
        callback = None
        if batch.callback_id is not None:
            callback = await self.reader.find_job(batch.callback_id)
        return self.view.render(
            request,
            "batch.html",
            nav="batches",
            page_title=f"Batch \u2026{short_id(batch.batch_id)}",
            batch=batch,
            callback=callback,
        )


async def job_links(reader: QueueInspector, job: JobStatus) -> JobLinks:
    """The chain and the batch of ``job``, read for its page."""
    chain = None if job.chain_id is None else await reader.get_chain(job.chain_id)
    batch = None if job.batch_id is None else await reader.get_batch(job.batch_id)
    return JobLinks(chain, batch)
