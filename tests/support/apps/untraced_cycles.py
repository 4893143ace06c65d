"""Enqueue, claim and complete jobs with no OpenTelemetry SDK configured, for the telemetry tests.

Run as ``python -m tests.support.apps.untraced_cycles`` with ``CARAVEL_TEST_URL`` naming a migrated,
empty SQLite queue. It runs ``CARAVEL_TEST_CYCLES`` (default 200) cycles of one enqueue and one
``run_once`` (claim, handler, complete) under :mod:`tracemalloc`, and prints one JSON object:

* what every handler saw as its current span (it must be a non-recording, invalid span);
* the live allocations made by the lines of ``caravel/telemetry.py`` (as the innermost Python
  frame) before the first cycle, after the first half and after the second half of the cycles,
  and once while a handler runs (proof that the measurement sees that module's allocations);
* which OpenTelemetry providers were in use, and whether any SDK module was imported.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import tracemalloc
from collections import Counter
from typing import Any

from opentelemetry import metrics, trace

from caravel import DatabaseQueue, DispatchOptions, JobContext, JobRegistry, QueueWorker, telemetry
from tests.support import Add

#: (recording, valid) of the span each handler saw, counted. A count, not a record per job: the
#: measurement below must not see this script's own memory grow with every cycle (dicts kept per
#: job can reuse storage CPython first allocated for telemetry.py's short-lived dicts, and
#: tracemalloc reports it where it was first allocated).
observed: Counter[tuple[bool, bool]] = Counter()
during_job: list[dict[str, int]] = []


def measure(*, collect: bool = True) -> dict[str, int]:
    if collect:
        gc.collect()
    snapshot = tracemalloc.take_snapshot()
    own = snapshot.filter_traces([tracemalloc.Filter(True, telemetry.__file__)])
    stats = own.statistics("filename")
    return {"bytes": sum(s.size for s in stats), "blocks": sum(s.count for s in stats)}


async def handle(job: Add, ctx: JobContext[object]) -> None:
    current = trace.get_current_span()
    observed[(current.is_recording(), current.get_span_context().is_valid)] += 1
    if not during_job and tracemalloc.is_tracing():
        during_job.append(measure(collect=False))


async def main() -> dict[str, Any]:
    cycles = int(os.environ.get("CARAVEL_TEST_CYCLES", "200"))
    registry = JobRegistry()
    registry.register("tests.add.v1", Add, handle)
    queue = DatabaseQueue(os.environ["CARAVEL_TEST_URL"], registry)
    where = DispatchOptions(queue="default", tenant_id="tenant-a")
    points: list[dict[str, int]] = []
    claimed = 0
    async with queue, QueueWorker(queue) as worker:
        tracemalloc.start(1)
        points.append(measure())
        for cycle in range(cycles):
            await queue.enqueue(Add(cycle), where)
            claimed += await worker.run_once("default")
            if cycle + 1 in (cycles // 2, cycles):
                points.append(measure())
        tracemalloc.stop()
    return {
        "cycles": cycles,
        "claimed": claimed,
        "observed": [
            {"recording": recording, "valid": valid, "jobs": jobs}
            for (recording, valid), jobs in observed.items()
        ],
        "memory": points,
        "during_job": during_job[0] if during_job else None,
        "telemetry_file": telemetry.__file__,
        "tracer_provider": type(trace.get_tracer_provider()).__name__,
        "meter_provider": type(metrics.get_meter_provider()).__name__,
        "sdk_imported": sorted(
            name for name in sys.modules if name.startswith("opentelemetry.sdk")
        ),
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
