"""``python -m bench --only replication``: what a streaming standby, and a synchronous one,
cost Caravel's commits on PostgreSQL.

A throwaway primary and a standby streaming from it (``tests/faults/replication.py``) run on
this machine, both with ``fsync`` and ``full_page_writes`` on (the throwaway clusters of the
tests turn them off), so a commit waits for a real flush on the primary and, when synchronous,
for one on the standby. On the same primary, each of :data:`MODES` in turn:

- ``no_standby``: the standby stopped, ``synchronous_commit = local`` (it streams through a
  replication slot, so the primary keeps the WAL it misses meanwhile);
- ``async``: the standby streaming, no synchronous standby named;
- ``sync``: the standby named in ``synchronous_standby_names``, ``synchronous_commit = on``:
  a commit returns once the standby has flushed it;
- ``remote_apply``: the same, ``synchronous_commit = remote_apply``: once the standby has
  replayed it (visible to its readers).

In each mode, each on a fresh database: one-call enqueues by one producer and by
``producers`` concurrent ones, bulk enqueue (``enqueue_many`` of 1,000), the drain of
``jobs`` jobs by one worker with its default (asynchronous) acknowledgements and with durable
ones, and ``commits`` bare one-row INSERTs in autocommit by one client (the server's own commit
latency, under Caravel's). ``runs`` rounds, the modes in a different order in each, so a
machine whose speed drifts affects every mode alike; each figure is the median of the rounds.
``added_commit_ms_<mode>`` is what the mode adds to one commit over ``no_standby``: from the bare
commits, and from one producer's enqueues (one commit each).

Both clusters share this machine's cores and disk and talk over loopback: the network round
trip of a standby on another machine comes on top.
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from tests.faults.replication import STANDBY_NAME, ReplicatedPair

from bench import runs
from bench.databases import postgres_dsn
from caravel import migrate as migrations

__all__ = ["MODES", "replication_cost"]

#: Each mode: whether the standby runs, ``synchronous_standby_names``, ``synchronous_commit``.
MODES: dict[str, tuple[bool, str, str]] = {
    "no_standby": (False, "", "local"),
    "async": (True, "", "on"),
    "sync": (True, STANDBY_NAME, "on"),
    "remote_apply": (True, STANDBY_NAME, "remote_apply"),
}

#: Both clusters: durable as a production server is (the throwaway clusters of the tests are
#: not), with the shared buffers of PostgreSQL's default configuration.
SETTINGS = {"fsync": "on", "full_page_writes": "on", "shared_buffers": "128MB"}

#: The figures of one mode in one round (see :func:`_round`).
Figures = dict[str, float]


def _set_mode(pair: ReplicatedPair, mode: str) -> None:
    """Put the pair in ``mode``: the standby started or stopped, the primary's settings
    reloaded, and (with a standby) streaming in the replication mode asked."""
    running, names, commit = MODES[mode]
    primary = pair.primary
    primary.admin_query(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
    primary.admin_query(f"ALTER SYSTEM SET synchronous_commit = '{commit}'")
    primary.admin_query("SELECT pg_reload_conf()")
    if not running:
        if pair.standby.is_up():
            pair.standby.stop("fast")
        deadline = time.monotonic() + 30
        while pair.replication_state() is not None:
            if time.monotonic() > deadline:
                raise RuntimeError("the stopped standby still streams after 30 s")
            time.sleep(0.05)  # a real walsender noticing its standby is gone
        return
    if not pair.standby.is_up():
        pair.standby.start()
    pair.wait_streaming(sync_state="sync" if names else "async")
    (shown,) = primary.admin_query("SHOW synchronous_commit")[0]
    if shown != commit:
        raise RuntimeError(f"synchronous_commit is {shown}, not {commit}, after the reload")


#: The physical replication slot the standby streams through.
SLOT = "caravel_bench_standby"


def _hold_wal(pair: ReplicatedPair) -> None:
    """Make the standby stream through a replication slot, so the primary keeps the WAL it
    has not received while it is stopped (``no_standby``) and it catches up when started."""
    pair.primary.admin_query("SELECT pg_create_physical_replication_slot(%s, true)", (SLOT,))
    pair.standby.admin_query(f"ALTER SYSTEM SET primary_slot_name = '{SLOT}'")
    pair.standby.admin_query("SELECT pg_reload_conf()")
    deadline = time.monotonic() + 60
    while not pair.primary.admin_query(
        "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
    )[0][0]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the standby does not stream through {SLOT} after 60 s")
        time.sleep(0.05)  # a real WAL receiver reconnecting
    pair.wait_streaming()


@contextmanager
def _database(pair: ReplicatedPair, migrate: bool = True) -> Iterator[str]:
    """A new database on the primary (migrated when asked), dropped afterwards."""
    name = f"caravel_bench_{secrets.token_hex(4)}"
    url = pair.create_database(name)
    try:
        if migrate:
            migrations.upgrade(url)
        yield url
    finally:
        pair.primary.admin_query(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _bare_commits(url: str, commits: int) -> float:
    """Milliseconds per commit of a one-row INSERT in autocommit, one client, after a warm-up."""
    with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_commits (n integer)")
        for n in range(20):
            conn.execute("INSERT INTO bench_commits VALUES (%s)", (n,))
        started = time.perf_counter()
        for n in range(commits):
            conn.execute("INSERT INTO bench_commits VALUES (%s)", (n,))
        return (time.perf_counter() - started) * 1000 / commits


def _round(pair: ReplicatedPair, args: Any) -> Figures:
    """One mode's figures, each measurement on a fresh database of the primary."""
    measured: list[tuple[str, Callable[[str], Any]]] = [
        ("enqueue_one", lambda url: runs.enqueue_single(url, args.single)),
        ("enqueue_parallel", lambda url: runs.enqueue_single(url, args.single * 2, args.producers)),
        ("bulk", lambda url: runs.enqueue_bulk(url, args.jobs)),
        ("drain_async_acks", lambda url: runs.drain(url, args.jobs, args.concurrency)),
        (
            "drain_durable_acks",
            lambda url: runs.drain(url, args.jobs, args.concurrency, durable_acks=True),
        ),
    ]
    figures: Figures = {}
    with _database(pair, migrate=False) as url:
        figures["bare_commit_ms"] = _bare_commits(url, args.replication_commits)
    for name, measure in measured:
        with _database(pair) as url:
            found = asyncio.run(measure(url))
        figures[f"{name}_jobs_per_second"] = found["jobs_per_second"]
        if "completed" in found:
            # Handler calls are what the drain counts; rows completed are counted after it.
            figures[f"{name}_completed"] = found["completed"]
    return figures


def replication_cost(args: Any, modes: Sequence[str] = tuple(MODES)) -> dict[str, Any]:
    """Each of ``modes`` (by default every one of :data:`MODES`; ``no_standby`` always),
    ``args.runs`` rounds, on one primary and standby made for the purpose and destroyed
    afterwards (see the module's doc)."""
    order = ["no_standby", *(mode for mode in MODES if mode in modes and mode != "no_standby")]
    pair = ReplicatedPair.create(synchronous=False, settings=SETTINGS)
    try:
        _hold_wal(pair)
    except BaseException:
        pair.destroy()
        raise
    rounds: dict[str, list[Figures]] = {mode: [] for mode in order}
    loads: list[str] = []
    try:
        for number in range(args.runs):
            for mode in order[number % len(order) :] + order[: number % len(order)]:
                _set_mode(pair, mode)
                loads.append(_loadavg())
                rounds[mode].append(_round(pair, args))
                print(f"  round {number + 1} {mode}: {_shown(rounds[mode][-1])}", flush=True)
        version = pair.primary.admin_query("SHOW server_version")[0][0]
    finally:
        pair.destroy()
    figures: dict[str, Any] = {
        "runs": args.runs,
        "jobs": args.jobs,
        "single": args.single,
        "producers": args.producers,
        "concurrency": args.concurrency,
        "commits": args.replication_commits,
        "server_version": version,
        "settings": SETTINGS,
        "loadavg_1m_at_each_mode": loads,
    }
    for mode, measured in rounds.items():
        for key in measured[0]:
            figures[f"{key}_{mode}"] = statistics.median(r[key] for r in measured)
            figures[f"{key}_runs_{mode}"] = [round(r[key], 3) for r in measured]
    base = "no_standby"
    for mode in order:
        if mode == base:
            continue
        figures[f"added_commit_ms_{mode}"] = (
            figures[f"bare_commit_ms_{mode}"] - figures[f"bare_commit_ms_{base}"]
        )
        figures[f"added_enqueue_ms_{mode}"] = (
            1000 / figures[f"enqueue_one_jobs_per_second_{mode}"]
            - 1000 / figures[f"enqueue_one_jobs_per_second_{base}"]
        )
    return figures


def _loadavg() -> str:
    with open("/proc/loadavg", encoding="ascii") as found:
        return found.read().split()[0]


def _shown(figures: Figures) -> str:
    return ", ".join(f"{k}={v:,.2f}" for k, v in figures.items())
