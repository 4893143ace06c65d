"""The benchmark's job types. ``Noop`` does nothing; ``Stamp`` prints its job id and the moment
its handler started, for the wake-up latency run (the worker runs in its own process)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from caravel import JobContext, JobRegistry

registry = JobRegistry()


@dataclass(frozen=True)
class Noop:
    n: int


@registry.handles("bench.noop.v1", Noop)
async def noop(job: Noop, ctx: JobContext[None]) -> None:
    return None


@dataclass(frozen=True)
class Stamp:
    n: int


@registry.handles("bench.stamp.v1", Stamp)
async def stamp(job: Stamp, ctx: JobContext[None]) -> None:
    sys.stdout.write(f"{ctx.job_id} {time.time():.6f}\n")
    sys.stdout.flush()
