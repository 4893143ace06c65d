"""``python -m bench --only scrape``: what one scrape of the autoscaling signal
(``caravel metrics``, ``/metrics``) costs over a large finished history.

The live jobs of ``bench --only counts`` are loaded, 1,000 jobs finished within the last minute,
and ``--history`` jobs finished long ago; then ``QueueInspector.scaling_signal`` is called
``calls`` times in a row on one reader, for every queue and for one. Each call's wall time holds
the client's work and the database's (the two take turns on one connection), so
``core_percent_at_1000_per_minute`` (the wall time of 1,000 scrapes as a share of a minute) is an
upper bound of what 1,000 scrapes a minute cost the client and the server together; the client's
own CPU time is reported beside it.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from bench.counts import _LIVE, NOW, _finished, _load
from caravel.clock import from_ms
from caravel.inspector import QueueInspector
from caravel.testing import ManualClock

__all__ = ["scrape"]

#: Jobs that finished within the minute before ``NOW`` (queue, state, rows, due, available_at,
#: lease, finished): what the last minute's throughput counts.
_RECENT = (("default", "completed", 1_000, "x", "NULL", "NULL", f"{NOW} - x"),)


async def _time(reader: QueueInspector, queue: str | None, calls: int) -> tuple[float, float]:
    """Median wall milliseconds of one scrape, and the client's CPU milliseconds per scrape."""
    await reader.scaling_signal(queue)  # warm: connections, statement caches
    walls = []
    cpu = time.process_time()
    for _ in range(calls):
        started = time.perf_counter()
        await reader.scaling_signal(queue)
        walls.append((time.perf_counter() - started) * 1000)
    return statistics.median(walls), (time.process_time() - cpu) * 1000 / calls


async def _scrapes(url: str, calls: int) -> dict[str, Any]:
    async with QueueInspector(url, clock=ManualClock(from_ms(NOW))) as reader:
        every_ms, every_cpu = await _time(reader, None, calls)
        one_ms, one_cpu = await _time(reader, "default", calls)
        signal = await reader.scaling_signal("default")
    return {
        "scrape_ms_every_queue": every_ms,
        "scrape_ms_one_queue": one_ms,
        "client_cpu_ms_every_queue": every_cpu,
        "client_cpu_ms_one_queue": one_cpu,
        "core_percent_at_1000_per_minute": max(every_ms, one_ms) * 1000 / 60_000 * 100,
        "reported_finished_last_minute": signal.queues[0].finished_last_minute,
        "reported_ready": signal.queues[0].ready,
    }


def scrape(url: str, history: int, calls: int = 200) -> dict[str, Any]:
    """The scrape's cost with the live jobs and the last minute's only, then with ``history``
    finished jobs besides."""
    _load(url, (*_LIVE, *_RECENT))
    small = asyncio.run(_scrapes(url, calls))
    _load(url, _finished(history))
    large = asyncio.run(_scrapes(url, calls))
    return {
        "finished_rows": history,
        **{f"{key}_live_only": value for key, value in small.items()},
        **large,
    }
