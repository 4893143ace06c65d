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


@dataclass(frozen=True)
class Tick:
    n: int


@registry.handles("bench.tick.v1", Tick)
async def tick(job: Tick, ctx: JobContext[None]) -> None:
    """The harness's start-up and wake-up handler (bench/adapters/_protocol.py ``stamp``)."""
    sys.stdout.write(f"stamp {job.n} {time.time():.6f}\n")
    sys.stdout.flush()
