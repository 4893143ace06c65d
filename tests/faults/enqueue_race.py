"""A client process for the duplicate-enqueue race: ``python -m tests.faults.enqueue_race URL
ROUNDS_JSON THREADS``.

Each thread opens its own :class:`~caravel.DatabaseQueue` on its own event loop and connects.
Then the process prints ``ready`` and reads a wall-clock start time from stdin (the parent sends
it once every process is ready), and for every round each thread waits for ``start + offset`` (so
threads of several processes fire together) and enqueues one
:class:`~tests.faults.effects_app.Effect` with the round's key and value. Prints one JSON object:
``{"pid": ..., "results": [[outcome per thread] per round]}``, where an outcome is
``{"job_id", "already"}`` or ``{"error": type name, "job_id": the conflicting job}``, plus
``late``: how long after the round's start the enqueue was sent (seconds).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from typing import Any

from caravel import DatabaseQueue, DispatchOptions, IdempotencyConflictError
from tests.faults.effects_app import Effect, registry


class Start:
    """Every thread connects, then waits here for the start time the parent sends."""

    def __init__(self, threads: int) -> None:
        self.connected = threading.Barrier(threads + 1)
        self.given = threading.Event()
        self.at = 0.0


async def _thread_main(
    url: str, rounds: list[dict[str, Any]], start: Start
) -> list[dict[str, Any]]:
    outcomes: list[dict[str, Any]] = []
    async with DatabaseQueue(url, registry) as queue:
        await queue.check_schema()  # connect before the race starts
        await asyncio.to_thread(start.connected.wait)
        await asyncio.to_thread(start.given.wait)
        for spec in rounds:
            start_at = start.at + spec["offset"]
            await asyncio.sleep(max(0.0, start_at - time.time()))  # fire at the shared moment
            dispatch = DispatchOptions(
                queue=spec["queue"], tenant_id=spec["tenant"], idempotency_key=spec["key"]
            )
            late = time.time() - start_at
            try:
                result = await queue.enqueue(Effect(value=spec["value"]), dispatch)
                outcomes.append({"job_id": str(result.job_id), "already": result.already_enqueued})
            except IdempotencyConflictError as exc:
                outcomes.append({"error": type(exc).__name__, "job_id": str(exc.job_id)})
            except Exception as exc:
                outcomes.append({"error": type(exc).__name__, "job_id": None})
            outcomes[-1]["late"] = late
    return outcomes


def main() -> None:
    url, rounds_json, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rounds: list[dict[str, Any]] = json.loads(rounds_json)
    found: list[list[dict[str, Any]]] = [[] for _ in range(threads)]
    start = Start(threads)

    def run(index: int) -> None:
        found[index] = asyncio.run(_thread_main(url, rounds, start))

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    start.connected.wait()
    print("ready", flush=True)
    start.at = float(sys.stdin.readline())
    start.given.set()
    for worker in workers:
        worker.join()
    per_round = [[found[t][r] for t in range(threads)] for r in range(len(rounds))]
    print(json.dumps({"pid": os.getpid(), "results": per_round}))


if __name__ == "__main__":
    main()
