"""A chain and a batch beside the seeded queue, for the dashboard's chain and batch pages: made
through the real queue API, in queues of their own so the seeded counts stay as they were."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from caravel import BatchResult, ChainResult, DatabaseQueue, DispatchOptions
from caravel.testing import ManualClock
from tests.support.dashboard.seed import END, GenerateReport, SendEmail, registry

CHAINED = "chained"
BATCHED = "batched"
CALLBACKS = "callbacks"
TENANT = "acme"


@dataclass(frozen=True)
class Links:
    chain: ChainResult
    batch: BatchResult


async def add_links(url: str, at: datetime = END) -> Links:
    """A three-step chain (its first step ready, the others held) and a batch of two jobs with
    a held callback, none of them run, made at ``at``."""
    options = DispatchOptions(queue=CHAINED, tenant_id=TENANT)
    members = DispatchOptions(queue=BATCHED, tenant_id=TENANT)
    async with DatabaseQueue(url, registry, clock=ManualClock(at)) as queue:
        chain = await queue.enqueue_chain(
            [
                (SendEmail(to="a@example.com", template="step-0"), options),
                (GenerateReport(report_id="chain-1"), options),
                (SendEmail(to="b@example.com", template="step-2"), options),
            ]
        )
        batch = await queue.enqueue_batch(
            [
                (GenerateReport(report_id="batch-0"), members),
                (GenerateReport(report_id="batch-1"), members),
            ],
            callback=(
                SendEmail(to="ops@example.com", template="batch-done"),
                DispatchOptions(queue=CALLBACKS, tenant_id=TENANT),
            ),
        )
    return Links(chain, batch)
