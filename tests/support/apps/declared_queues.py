"""A job registry that names the queues its workers serve, for ``caravel worker --app
tests.support.apps.declared_queues:registry`` without ``--queue``: two declared queues and a
schedule's queue."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from caravel import JobContext, JobRegistry, Schedule

registry = JobRegistry(queues=["alpha", "beta"])


@dataclass(frozen=True)
class Echo:
    text: str


@registry.handles("tests.echo.v1", Echo)
async def echo(job: Echo, ctx: JobContext[object]) -> str:
    return f"{ctx.queue}:{job.text}"


registry.schedule(Schedule("yearly-echo", Echo("tick"), queue="gamma", every=timedelta(days=366)))
