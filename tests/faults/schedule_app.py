"""The worker app of the scheduler fault scenario
(``caravel worker --app tests.faults.schedule_app:registry``): two schedules due every second,
one per missed policy, whose slots' jobs go to a queue no worker of the scenario serves, so
every slot's row stays in ``caravel_jobs`` for the checker, with the time it was enqueued."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from caravel import JobContext, JobRegistry, Schedule

__all__ = ["EVERY", "SCHEDULES", "TICKS_QUEUE", "Tick", "registry"]

#: The queue of the slots' jobs; the scenario's workers serve another one.
TICKS_QUEUE = "ticks"
EVERY = timedelta(seconds=1)

registry = JobRegistry()


@dataclass(frozen=True)
class Tick:
    schedule: str


@registry.handles("faults.tick.v1", Tick)
async def tick(job: Tick, ctx: JobContext[None]) -> None:
    """Never run in the scenario (nobody serves the queue); a registered type is required."""


#: Schedule name -> its missed policy.
SCHEDULES = {"tick-latest": "latest", "tick-skip": "skip"}

registry.schedule(
    Schedule("tick-latest", Tick("tick-latest"), queue=TICKS_QUEUE, every=EVERY, missed="latest")
)
registry.schedule(
    Schedule("tick-skip", Tick("tick-skip"), queue=TICKS_QUEUE, every=EVERY, missed="skip")
)
