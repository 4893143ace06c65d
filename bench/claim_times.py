"""Where a limited drain's extra time goes: the drain of ``python -m bench --only limits`` under
each of its settings, with every claim the worker makes timed on its own (how many, how large,
how long), so the cost of a limit reads per claim rather than per drain::

    python -m bench.claim_times --backend postgresql --jobs 20000 --concurrency 1000
    python -m bench.claim_times --backend sqlite --settings plain fair rate

Each setting drains on a fresh database (:func:`bench.runs.drain`). The claims are timed around
the dialect store's ``job_claim_many`` (the telemetry wrapper excluded), in this process only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.databases import database
from bench.limits_cost import SETTINGS
from bench.runs import drain
from caravel.store.postgresql import PostgresStore
from caravel.store.sqlite.store import SqliteStore

_STORES: dict[str, Any] = {"postgresql": PostgresStore, "sqlite": SqliteStore}


@contextmanager
def timed_claims(backend: str) -> Iterator[list[tuple[float, int]]]:
    """Every claim the backend's store makes inside the block, as (seconds, jobs claimed)."""
    store = _STORES[backend]
    original = store.job_claim_many
    seen: list[tuple[float, int]] = []

    async def claim(self: Any, request: Any) -> Any:
        started = time.perf_counter()
        batch = await original(self, request)
        seen.append((time.perf_counter() - started, len(batch.claimed)))
        return batch

    store.job_claim_many = claim
    try:
        yield seen
    finally:
        store.job_claim_many = original


async def measure(backend: str, setting: str, jobs: int, concurrency: int) -> dict[str, Any]:
    """One drain under ``setting``: its rate and its claims' count, sizes and times."""
    with database(backend) as url, timed_claims(backend) as seen:
        figures = await drain(url, jobs, concurrency, **SETTINGS[setting])
    times = sorted(seconds for seconds, _ in seen)
    return {
        "setting": setting,
        "jobs_per_second": round(figures["jobs_per_second"]),
        "claims": len(seen),
        "mean_claimed": round(statistics.mean(size for _, size in seen)),
        "claim_seconds": round(sum(times), 3),
        "median_claim_ms": round(statistics.median(times) * 1000, 1),
        "p90_claim_ms": round(times[int(len(times) * 0.9)] * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=sorted(_STORES), default="postgresql")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=1000)
    args = parser.parse_args()
    for setting in args.settings:
        found = asyncio.run(measure(args.backend, setting, args.jobs, args.concurrency))
        print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
