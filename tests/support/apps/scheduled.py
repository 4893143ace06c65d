"""A job registry with schedules, for ``caravel schedules list --app
tests.support.apps.scheduled:registry``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from caravel import JobContext, JobRegistry, Schedule

registry = JobRegistry()


@dataclass(frozen=True)
class Digest:
    kind: str


@registry.handles("tests.digest.v1", Digest)
async def digest(job: Digest, ctx: JobContext[object]) -> None:
    return None


registry.schedule(
    Schedule(
        "nightly-digest",
        Digest("nightly"),
        queue="emails",
        cron="30 2 * * *",
        timezone="Europe/Berlin",
    )
)
registry.schedule(Schedule("heartbeat", Digest("tick"), queue="emails", every=timedelta(minutes=5)))
