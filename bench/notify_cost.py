"""``python -m bench --only notify``: what waking workers costs the producers on PostgreSQL.

One ``enqueue`` call per job from 32 concurrent producers (``--producers`` sets another count),
each with its own idempotency key, as ``enqueue_parallel`` does, under each wake-up setting of
the queue's URL: no NOTIFY at all (``wakeups=off``, what a polling-only deployment runs), one
NOTIFY with every enqueue transaction (``notify_window_ms=0``), and the default window (at most
one enqueue per queue and process carries a NOTIFY per window, a trailing one covering the
rest). A LISTEN connection stays open throughout, as a worker's would, and counts the
notifications that reached it. The settings take turns within each run, each on a fresh
database, so a machine whose speed drifts affects them alike.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from bench import runs
from bench.databases import database
from caravel.store.postgresql.notifications import CHANNEL, NOTIFY_COOLDOWN

__all__ = ["SETTINGS", "notify_cost"]

#: Each setting's URL query options.
SETTINGS: dict[str, dict[str, str]] = {
    "wakeups_off": {"wakeups": "off"},
    "window_0ms": {"notify_window_ms": "0"},
    "window_1ms": {"notify_window_ms": "1"},
    f"window_{round(NOTIFY_COOLDOWN * 1000)}ms_default": {},
}
_MARK = "bench-mark"


async def _heard_during(url: str, query: dict[str, str], n: int, producers: int) -> dict[str, Any]:
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    heard: list[str] = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as listener:
        await listener.execute(f"LISTEN {CHANNEL}")

        async def collect() -> None:
            async for note in listener.notifies():
                heard.append(note.payload)
                if note.payload == _MARK:
                    return

        collecting = asyncio.create_task(collect())
        with_options = make_url(url).update_query_dict(query).render_as_string(False)
        figures = await runs.enqueue_single(with_options, n, producers)
        # The queue is closed (trailing wake-ups sent); a last NOTIFY, heard after every one
        # committed before it, ends the count.
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as sender:
            await sender.execute("SELECT pg_notify(%s, %s)", (CHANNEL, _MARK))
        await asyncio.wait_for(collecting, 60)
    figures["notifications"] = len(heard) - 1
    return figures


def notify_cost(n: int, producers: int, rounds: int) -> dict[str, Any]:
    """Each setting's jobs/s and notifications heard, the median over ``rounds`` runs."""
    measured: dict[str, list[dict[str, Any]]] = {name: [] for name in SETTINGS}
    for _ in range(rounds):
        for name, query in SETTINGS.items():
            with database("postgresql") as url:
                measured[name].append(asyncio.run(_heard_during(url, query, n, producers)))
    figures: dict[str, Any] = {"jobs": n, "producers": producers, "runs": rounds}
    for name, results in measured.items():
        rates = sorted(r["jobs_per_second"] for r in results)
        figures[f"{name}_jobs_per_second"] = rates[len(rates) // 2]
        figures[f"{name}_jobs_per_second_runs"] = [round(r["jobs_per_second"]) for r in results]
        figures[f"{name}_notifications"] = sorted(r["notifications"] for r in results)[
            len(results) // 2
        ]
    return figures
