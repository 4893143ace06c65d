"""The benchmark's job types. ``Noop`` does nothing; ``Stamp`` prints its job id and the moment
its handler started, for the wake-up latency run (the worker runs in its own process). With
``CARAVEL_BENCH_TRACE=1`` in the worker's environment, ``Stamp`` also prints, as JSON, the
garbage collector's pauses and the store operations since the previous job."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from caravel import JobContext, JobRegistry

registry = JobRegistry()
#: The queue every benchmark uses.
QUEUE = "bench"


def worker_command(url: str, *flags: str, queue: str = QUEUE) -> list[str]:
    """``caravel worker`` for ``queue`` with this module's registry, on this Python."""
    app = ["--app", "bench.apps:registry", "--queue", queue]
    return [sys.executable, "-m", "caravel", "worker", "--url", url, *app, *flags]


@dataclass(frozen=True)
class Noop:
    n: int


@registry.handles("bench.noop.v1", Noop)
async def noop(job: Noop, ctx: JobContext[None]) -> None:
    return None


@dataclass(frozen=True)
class Stamp:
    n: int


TRACE_ENV = "CARAVEL_BENCH_TRACE"


class _Trace:
    """What the worker did since it was last asked, as wall-clock intervals: the garbage
    collector's pauses (start, milliseconds, generation) and the store operations Caravel's
    client spans record (name, start, milliseconds)."""

    def __init__(self) -> None:
        self._began = (0.0, 0.0)
        self.gc: list[tuple[float, float, int]] = []
        self.ops: list[tuple[str, float, float]] = []

    def collecting(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = (time.time(), time.perf_counter())
            return
        ms = (time.perf_counter() - self._began[1]) * 1000
        self.gc.append((round(self._began[0], 6), round(ms, 3), info["generation"]))

    def span_ended(self, name: str, start_ns: int, end_ns: int) -> None:
        name = name.removeprefix("caravel.store.")
        self.ops.append((name, round(start_ns / 1e9, 6), round((end_ns - start_ns) / 1e6, 3)))

    def take(self) -> str:
        found = {"gc": self.gc, "ops": self.ops}
        self.gc, self.ops = [], []
        return json.dumps(found, separators=(",", ":"))


def _install_trace() -> _Trace:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

    found = _Trace()

    class Recorder(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            if span.name.startswith("caravel.store.") and span.start_time and span.end_time:
                found.span_ended(span.name, span.start_time, span.end_time)

    provider = TracerProvider()
    provider.add_span_processor(Recorder())
    trace.set_tracer_provider(provider)
    gc.callbacks.append(found.collecting)
    return found


_trace = _install_trace() if os.environ.get(TRACE_ENV) else None


@registry.handles("bench.stamp.v1", Stamp)
async def stamp(job: Stamp, ctx: JobContext[None]) -> None:
    at = time.time()
    extra = "" if _trace is None else f" {_trace.take()}"
    sys.stdout.write(f"{ctx.job_id} {at:.6f}{extra}\n")
    sys.stdout.flush()


@dataclass(frozen=True)
class Tick:
    n: int


@registry.handles("bench.tick.v1", Tick)
async def tick(job: Tick, ctx: JobContext[None]) -> None:
    """The harness's start-up and wake-up handler (bench/adapters/_protocol.py ``stamp``)."""
    sys.stdout.write(f"stamp {job.n} {time.time():.6f}\n")
    sys.stdout.flush()
