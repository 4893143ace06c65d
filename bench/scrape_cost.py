"""``python -m bench --only scrape``: what one scrape of the autoscaling signal
(``caravel metrics``, ``/metrics``) costs over a large finished history.

The live jobs of ``bench --only counts`` are loaded, 1,000 jobs finished within the last minute,
and ``--history`` jobs finished long ago. Two readings follow.

In process: ``QueueInspector.scaling_signal`` is called ``calls`` times in a row on one reader,
for every queue and for one. Each call's wall time holds the client's work and the database's
(the two take turns on one connection); the client's own CPU time is reported beside it, and on
PostgreSQL the CPU time of the server backends that answered (read from ``/proc/<pid>/stat``
before and after, for every session of the bench's database).

Served: ``caravel metrics --serve`` runs in its own process and is scraped ``scrapes`` times
over HTTP, as fast as it answers (a Prometheus scrape of every queue, then a JSON read of one).
The server's cost is what the scrapes took of CPU time where they were served, read from
``/proc``: the endpoint process, and on PostgreSQL the backends of its sessions. The scraper's
own CPU is not part of it. ``server_core_percent_at_1000_per_minute`` is CPU seconds per scrape
x 1,000 / 60 s: the share of one core that 1,000 scrapes a minute keep busy. It is measured
with ``--max-age 0`` (every scrape reads the database: the honest cost of one read), then again
with the default ``--max-age`` of 1 second (``cached_*``): there 1,000 scrapes a minute read the
database at most 60 times and the rest are answered from the shared read, so
``cached_server_core_percent_at_1000_per_minute`` is 60 uncached scrapes plus 940 answered ones.
CPU time, unlike wall time, does not grow when other work on the machine takes turns on its
cores, so the figure holds on a shared machine (within the 10 ms resolution of the kernel's
accounting, over some seconds of CPU in all).
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy.engine import make_url

from bench.counts import _LIVE, NOW, _finished, _load
from bench.databases import postgres_dsn
from bench.harness import _cpu_of
from caravel.clock import from_ms
from caravel.inspector import QueueInspector
from caravel.store.urls import backend_of
from caravel.testing import ManualClock

__all__ = ["scrape"]

ROOT = Path(__file__).resolve().parent.parent


def _recent(now: int) -> tuple[tuple[str, str, int, str, str, str, str], ...]:
    """1,000 jobs that finished within the second before ``now`` (queue, state, rows, due,
    available_at, lease, finished): what the last minute's throughput counts."""
    return (("default", "completed", 1_000, "x", "NULL", "NULL", f"{now} - x"),)


class _Backends:
    """The CPU time of the server sessions of one PostgreSQL database, but the one asking:
    every session of a bench database is the reader's or the endpoint's. Does nothing for
    SQLite, which has no server."""

    def __init__(self, url: str) -> None:
        self.conn = (
            psycopg.connect(postgres_dsn(url), autocommit=True)
            if backend_of(url) == "postgresql"
            else None
        )
        self.database = make_url(url).database

    def pids(self) -> set[int]:
        if self.conn is None:
            return set()
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (self.database,),
        ).fetchall()
        return {int(r[0]) for r in rows}

    def read(self) -> dict[int, float]:
        return {pid: _cpu_of(pid) for pid in self.pids()}

    @staticmethod
    def spent(before: dict[int, float], after: dict[int, float]) -> float:
        """CPU seconds spent between two readings (a session that opened meanwhile: all of
        its time; one that closed meanwhile is lost with its last seconds, so the reader keeps
        its sessions open)."""
        return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


async def _time(
    reader: QueueInspector, queue: str | None, calls: int, server: _Backends
) -> tuple[float, float, float]:
    """Median wall milliseconds of one scrape, the client's CPU milliseconds per scrape, and
    the server backends' (0 on SQLite)."""
    await reader.scaling_signal(queue)  # warm: connections, statement caches
    walls = []
    backends = server.read()
    cpu = time.process_time()
    for _ in range(calls):
        started = time.perf_counter()
        await reader.scaling_signal(queue)
        walls.append((time.perf_counter() - started) * 1000)
    client = (time.process_time() - cpu) * 1000 / calls
    return statistics.median(walls), client, server.spent(backends, server.read()) * 1000 / calls


async def _scrapes(url: str, calls: int, now: int) -> dict[str, Any]:
    server = _Backends(url)
    try:
        async with QueueInspector(url, clock=ManualClock(from_ms(now))) as reader:
            every_ms, every_cpu, every_server = await _time(reader, None, calls, server)
            one_ms, one_cpu, one_server = await _time(reader, "default", calls, server)
            signal = await reader.scaling_signal("default")
    finally:
        server.close()
    figures = {
        "scrape_ms_every_queue": every_ms,
        "scrape_ms_one_queue": one_ms,
        "client_cpu_ms_every_queue": every_cpu,
        "client_cpu_ms_one_queue": one_cpu,
        "core_percent_at_1000_per_minute": max(every_ms, one_ms) * 1000 / 60_000 * 100,
        "reported_finished_last_minute": signal.queues[0].finished_last_minute,
        "reported_ready": signal.queues[0].ready,
    }
    if backend_of(url) == "postgresql":
        figures["backend_cpu_ms_every_queue"] = every_server
        figures["backend_cpu_ms_one_queue"] = one_server
    return figures


# ----- the endpoint in its own process -----------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def _endpoint(url: str, max_age: float) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``caravel metrics --serve --max-age MAX_AGE`` on a free loopback port, once it answers;
    stopped after."""
    port = _free_port()
    command = [sys.executable, "-m", "caravel", "metrics", "--url", url, "--serve"]
    command += ["--max-age", str(max_age)]
    served = subprocess.Popen(
        [*command, "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/metrics", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if served.poll() is not None or time.monotonic() > deadline:
                _, err = served.communicate(timeout=10)
                raise RuntimeError(f"caravel metrics --serve did not answer: {err[-2000:]}")
            time.sleep(0.1)  # a real server starting
        yield served, base
    finally:
        served.terminate()
        try:
            served.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            served.kill()
            served.communicate()


def _served_cost(
    url: str, base: str, endpoint: int, scrapes: int, request: Callable[[httpx.Client], Any]
) -> dict[str, float]:
    """CPU milliseconds per scrape of the endpoint process and of its database sessions, over
    ``scrapes`` requests in a row (after a warm-up), and the median wall milliseconds of one
    as the scraper saw it."""
    server = _Backends(url)
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            for _ in range(20):  # warm: its connections, statement caches, imports
                request(client)
            process, backends = _cpu_of(endpoint), server.read()
            walls = []
            for _ in range(scrapes):
                started = time.perf_counter()
                request(client)
                walls.append((time.perf_counter() - started) * 1000)
            process = _cpu_of(endpoint) - process
            database = server.spent(backends, server.read())
    finally:
        server.close()
    return {
        "endpoint_cpu_ms": process * 1000 / scrapes,
        "backend_cpu_ms": database * 1000 / scrapes,
        "wall_ms": statistics.median(walls),
    }


def _checked(response: httpx.Response) -> httpx.Response:
    response.raise_for_status()
    return response


#: The two requests the served reading makes: a Prometheus scrape of every queue (the text
#: format, as Prometheus asks for it), and an autoscaler's JSON read of one queue.
_REQUESTS: dict[str, Callable[[httpx.Client], Any]] = {
    "every_queue": lambda c: _checked(c.get("/metrics", headers={"accept": "text/plain"})),
    "one_queue": lambda c: _checked(c.get("/metrics", params={"queue": "default"})),
}


#: The endpoint's default ``--max-age``: a signal read up to a second ago is answered again.
DEFAULT_MAX_AGE = 1.0


def _served_once(url: str, scrapes: int, max_age: float, prefix: str) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with _endpoint(url, max_age) as (process, base):
        for name, request in _REQUESTS.items():
            cost = _served_cost(url, base, process.pid, scrapes, request)
            server_ms = cost["endpoint_cpu_ms"] + cost["backend_cpu_ms"]
            figures[f"{prefix}endpoint_cpu_ms_{name}"] = cost["endpoint_cpu_ms"]
            figures[f"{prefix}backend_cpu_ms_{name}"] = cost["backend_cpu_ms"]
            figures[f"{prefix}server_cpu_ms_{name}"] = server_ms
            figures[f"{prefix}wall_ms_{name}"] = cost["wall_ms"]
    return figures


def served(url: str, scrapes: int) -> dict[str, Any]:
    """The server's CPU per scrape of ``caravel metrics --serve`` (see the module's doc):
    with ``--max-age 0``, every scrape reading the database (``served_*``); then with the
    default ``--max-age``, scraped as fast as it answers, so nearly every scrape is answered
    from the shared read (``cached_*``)."""
    figures: dict[str, Any] = {"served_scrapes": scrapes}
    figures |= _served_once(url, scrapes, 0.0, "served_")
    figures |= _served_once(url, scrapes, DEFAULT_MAX_AGE, "cached_")
    for name in _REQUESTS:
        # CPU seconds per scrape x 1,000 scrapes / 60 s, as a percentage of one core.
        uncached = figures[f"served_server_cpu_ms_{name}"]
        figures[f"server_core_percent_at_1000_per_minute_{name}"] = uncached * 1000 / 60_000 * 100
        # With the cache, 1,000 scrapes a minute of one kind read the database at most once
        # per max_age (60 times a minute) and answer the rest from the shared read.
        reads = 60 / DEFAULT_MAX_AGE
        answered = figures[f"cached_server_cpu_ms_{name}"]
        cached = (uncached * reads + answered * (1000 - reads)) / 60_000 * 100
        figures[f"cached_server_core_percent_at_1000_per_minute_{name}"] = cached
    for prefix in ("", "cached_"):
        figures[f"{prefix}server_core_percent_at_1000_per_minute"] = max(
            figures[f"{prefix}server_core_percent_at_1000_per_minute_{name}"] for name in _REQUESTS
        )
    return figures


def scrape(url: str, history: int, calls: int = 200, scrapes: int = 1_000) -> dict[str, Any]:
    """The scrape's cost with the live jobs and the last minute's only, then with ``history``
    finished jobs besides (the reader's clock at ``NOW``); then the served endpoint's over the
    same rows, ``scrapes`` times each way, after another 1,000 jobs finished within the last
    second by the real clock, which the endpoint reads."""
    _load(url, (*_LIVE, *_recent(NOW)))
    small = asyncio.run(_scrapes(url, calls, NOW))
    _load(url, _finished(history))
    large = asyncio.run(_scrapes(url, calls, NOW))
    # The endpoint reads the real clock: by it the live jobs above are all due (the delayed
    # ones were delayed until 2001) and the running ones' leases expired; the rows it reads
    # are the same.
    _load(url, _recent(int(time.time() * 1000)))
    return {
        "finished_rows": history,
        **{f"{key}_live_only": value for key, value in small.items()},
        **large,
        **served(url, scrapes),
    }
