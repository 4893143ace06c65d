"""What every adapter script shares (standard library only: the oban adapter runs in a virtual
environment of its own, on another Python).

An adapter is run as ``python <library>_adapter.py MODE --dsn DSN [--jobs N] [--settings JSON]``.
Every mode sets itself up, prints ``ready``, waits for ``go`` on standard input, does its work,
prints ``result <json>`` and waits for ``exit`` (or the end of its input) before it closes its
connections: so the harness can take its readings of this process's and the database server's
CPU time exactly around the work. In the ``drain`` mode the work is a worker that runs until the
harness writes ``stop``; meanwhile the adapter prints ``count <handled>`` as its handlers run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

QUEUE = "bench"


class Control:
    """The lines the harness writes to this process, as asyncio events."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.go = asyncio.Event()
        self.stop = asyncio.Event()
        self.exit = asyncio.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            event = {"go": self.go, "stop": self.stop, "exit": self.exit}.get(line.strip())
            if event is not None:
                self.loop.call_soon_threadsafe(event.set)
        for event in (self.go, self.stop, self.exit):
            self.loop.call_soon_threadsafe(event.set)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Counter:
    """Handled jobs, reported to the harness at most every 10 ms while they change."""

    def __init__(self) -> None:
        self.handled = 0
        self._shown = 0

    def hit(self) -> None:
        self.handled += 1

    async def report(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.flush()

    def flush(self) -> None:
        if self.handled != self._shown:
            self._shown = self.handled
            say(f"count {self.handled}")


def stamp(n: int) -> None:
    """A latency or start-up handler's line: the job's number and the moment it started."""
    say(f"stamp {n} {time.time():.6f}")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--jobs", type=int, default=0)
    parser.add_argument("--settings", type=json.loads, default={})
    return parser.parse_args()


Work = Callable[[Control], Awaitable[dict[str, Any]]]


async def serve(
    setup: Callable[[], Awaitable[Work]], teardown: Callable[[], Awaitable[None]]
) -> None:
    """Set up, then run one piece of work between ``go`` and ``result`` as described above."""
    control = Control()
    work = await setup()
    say("ready")
    await control.go.wait()
    started = time.perf_counter()
    result = await work(control)
    result.setdefault("seconds", time.perf_counter() - started)
    say("result " + json.dumps(result))
    await control.exit.wait()
    await teardown()


async def drain(
    control: Control, counter: Counter, run: Awaitable[None], stop: Callable[[], Any]
) -> dict[str, Any]:
    """Run a worker (``run``) until the harness says ``stop``; ``stop`` asks it to finish."""
    reporter = asyncio.create_task(counter.report())
    worker = asyncio.ensure_future(run)
    stopping = asyncio.create_task(control.stop.wait())
    await asyncio.wait({worker, stopping}, return_when=asyncio.FIRST_COMPLETED)
    result = stop()
    if asyncio.iscoroutine(result):
        await result
    await worker
    reporter.cancel()
    counter.flush()
    return {"handled": counter.handled}


async def produce_one_by_one(
    jobs: int, enqueue: Callable[[int], Awaitable[Any]], settings: dict[str, Any]
) -> dict[str, Any]:
    """``jobs`` calls of ``enqueue``, one at a time, ``settings["gap"]`` seconds apart, for the
    jobs numbered from ``settings["first"]`` on; for ``tick`` jobs, with the moment just before
    each call (the wake-up latency's start)."""
    gap = float(settings.get("gap", 0))
    first = int(settings.get("first", 0))
    starts: list[float] = []
    started = time.perf_counter()
    cpu = time.process_time()
    for i in range(jobs):
        starts.append(time.time())
        await enqueue(first + i)
        if gap:
            await asyncio.sleep(gap)
    figures: dict[str, Any] = {
        "seconds": time.perf_counter() - started,
        "process_cpu_seconds": time.process_time() - cpu,
    }
    if settings.get("job") == "tick":
        figures["starts"] = starts
    return figures


def run(main: Callable[[], Awaitable[None]], loop: str = "asyncio") -> None:
    """Run ``main`` on asyncio's own loop or on uvloop (the peers' command lines use uvloop
    when it is installed)."""
    if loop == "uvloop":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())
