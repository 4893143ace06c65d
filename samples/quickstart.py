"""The smallest end-to-end run: migrate a temporary SQLite file, enqueue a job, run the worker
once, print the job's final status.

    python -m caravel_samples.quickstart
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from caravel import DatabaseQueue, DispatchOptions, JobContext, JobRegistry, QueueWorker, migrate

registry = JobRegistry()


@dataclass(frozen=True)
class GenerateReport:
    report_id: str


@registry.handles("reports.generate.v1", GenerateReport)
async def generate_report(job: GenerateReport, ctx: JobContext[None]) -> None:
    print(f"handling report {job.report_id} (job {ctx.job_id}, attempt {ctx.attempt})")


async def main(directory: Path) -> None:
    url = f"sqlite:///{directory / 'queue.db'}"
    migrate.upgrade(url)  # a deliberate step: the queue never creates its own tables
    async with DatabaseQueue(url, registry) as queue:
        dispatch = DispatchOptions(queue="reports", tenant_id="demo", idempotency_key="report-1")
        accepted = await queue.enqueue(GenerateReport("r-1"), dispatch)
        again = await queue.enqueue(GenerateReport("r-1"), dispatch)
        same = again.job_id == accepted.job_id
        print(f"enqueued {accepted.job_id}; the retry returned the same job: {same}")
        async with QueueWorker(queue) as worker:
            claimed = await worker.run_once("reports")
        status = await queue.get_status(accepted.job_id, "reports", "demo")
        assert status is not None
        print(f"claimed: {claimed}; final state: {status.state.value}, attempts: {status.attempt}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="caravel-quickstart-") as scratch:
        asyncio.run(main(Path(scratch)))
