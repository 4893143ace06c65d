"""The sample's one job type and its repeat-safe handler."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from caravel_samples.worker.results import record
from caravel_samples.worker.settings import CRASH_EXIT_CODE, Settings
from sqlalchemy.ext.asyncio import AsyncSession

from caravel import JobContext, JobRegistry

QUEUE = "reports"
TENANT = "demo"

registry = JobRegistry()


@dataclass(frozen=True)
class AddToReport:
    """Add ``quantity`` to the demo report."""

    quantity: int


@registry.handles("samples.report.add.v1", AddToReport)
async def add_to_report(job: AddToReport, ctx: JobContext[AsyncSession]) -> None:
    settings = Settings.from_environment()
    if settings.handler_delay_ms:
        await asyncio.sleep(settings.handler_delay_ms / 1000)  # smoke test: room for a signal
    # The stored tenant (ctx.tenant_id) scopes the data, never a field of the payload.
    saved = await record(ctx.scope, ctx.job_id, ctx.tenant_id, job.quantity)
    if saved and settings.crash_after_result:
        # Smoke-test only: die after saving the result and before the queue hears of it.
        os._exit(CRASH_EXIT_CODE)
