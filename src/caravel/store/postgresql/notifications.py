"""Wake-ups over LISTEN/NOTIFY: which enqueues announce new work (the announcer), and the feed
of announced queue names a worker listens to."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol

import psycopg
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from caravel.clock import Clock
from caravel.store.postgresql.connections import CONNECT_ARGS
from caravel.store.protocol import NewJob

__all__ = [
    "CHANNEL",
    "NOTIFY",
    "NOTIFY_COOLDOWN",
    "QUEUES_CHANNEL",
    "QUEUE_CHANGED",
    "Announcer",
    "listen",
]

logger = logging.getLogger("caravel.store")

#: The channel enqueues announce new work on; the payload is the queue name.
CHANNEL = "caravel_jobs"
#: The channel a pause or resume is announced on, in its own transaction; the payload is the
#: queue name. Separate from :data:`CHANNEL`, so a worker re-reads which queues are paused only
#: when one changed, never on an enqueue's wake-up.
QUEUES_CHANNEL = "caravel_queues"
QUEUE_CHANGED = sa.text(f"SELECT pg_notify('{QUEUES_CHANNEL}', :b_queue)")
LISTEN_RETRY_SECONDS = 1.0
#: At most one enqueue transaction per queue and process carries a NOTIFY within this window
#: (seconds). 0 sends one per transaction that brings a queue jobs due now; docs/performance.md
#: has the measurements behind the default.
NOTIFY_COOLDOWN = 0.005
NOTIFY = sa.text(f"SELECT pg_notify('{CHANNEL}', :queue)")
#: The trailing wake-up sent on its own needs no durability: it does not wait for the disk.
_NOTIFY_ALONE = sa.text(
    f"SELECT set_config('synchronous_commit', 'off', true), pg_notify('{CHANNEL}', :queue)"
)


class _Timer(Protocol):
    def cancel(self) -> object: ...


async def _after(wait: Awaitable[None], then: Callable[[str], None], queue: str) -> None:
    await wait
    then(queue)


class Announcer:
    """Decides which enqueues wake the workers, so that NOTIFY never throttles enqueueing.

    A NOTIFY takes a database-wide lock when its transaction commits and holds it until the
    commit is on disk, so if every enqueue sent one, concurrent enqueues would commit one at a
    time. Instead, per queue, the first enqueue after a quiet ``NOTIFY_COOLDOWN`` carries the
    NOTIFY in its own transaction (no extra round trip), and enqueues within the cooldown carry
    none. Each of those, once committed, arms (or pushes back) a trailing wake-up that fires when
    the queue has had no enqueue for the cooldown: a separate NOTIFY that does not wait for the
    disk. A steady stream therefore sends about one NOTIFY per cooldown, all inside enqueues, and
    the last job of a burst is announced at most a cooldown after its commit. A wake-up that
    fails to send only delays workers until they poll.

    Enqueues run on the store's event loop, or on callers' threads (the sync facade's one-job
    enqueue, which hands the arming of a trailing wake-up to the loop): the state is shared
    under a lock, and timed on the monotonic clock, as the loop's own timers are; or on
    ``clock`` when one is given (tests move a manual clock instead of waiting). ``cooldown``
    0 makes every enqueue of jobs due now carry its queue's NOTIFY (still one per queue and
    transaction, whatever the number of jobs), with no trailing wake-up; ``enabled`` False
    sends none at all (workers that only poll).
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        cooldown: float = NOTIFY_COOLDOWN,
        clock: Clock | None = None,
        enabled: bool = True,
    ) -> None:
        self._engine = engine
        self.cooldown = cooldown
        self.enabled = enabled
        self._clock = clock
        self._lock = threading.Lock()
        #: When each queue's latest NOTIFY was decided.
        self._last: dict[str, float] = {}
        #: Each queue's latest commit of jobs due now that no NOTIFY has covered yet.
        self._unannounced: dict[str, float] = {}
        #: The queues with a trailing wake-up armed (``None``: being armed, handed to the loop).
        self._trailing: dict[str, _Timer | None] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def _now(self) -> float:
        return time.monotonic() if self._clock is None else self._clock.now_ms() / 1000

    def _later(self, delay: float, queue: str) -> _Timer:
        """Call :meth:`_trail` for ``queue`` once ``delay`` seconds have passed."""
        if self._clock is None:
            return asyncio.get_running_loop().call_later(delay, self._trail, queue)
        return asyncio.ensure_future(_after(self._clock.sleep(delay), self._trail, queue))

    def lead(self, queue: str) -> bool:
        """Whether the enqueue about to run should carry the queue's NOTIFY."""
        if not self.enabled:
            return False
        now = self._now()
        with self._lock:
            if now - self._last.get(queue, -self.cooldown) < self.cooldown:
                return False
            self._last[queue] = now
            return True

    def leading(self, new_jobs: Sequence[NewJob]) -> frozenset[str]:
        """The queues whose NOTIFY an insert of ``new_jobs`` carries: those it brings jobs due
        now, each where this insert is the first in its cooldown."""
        return frozenset(filter(self.lead, {j.queue for j in new_jobs if j.due_at <= j.created_at}))

    def committed(
        self, queue: str, *, announced: bool, loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        """Jobs due now were committed to ``queue``, with or without a NOTIFY of their own.
        Called on the store's event loop, or from another thread with ``loop``, that loop."""
        if not self.enabled:
            return
        with self._lock:
            if announced or self.cooldown <= 0:
                # Every commit before it is covered: an armed wake-up finds nothing to send.
                # (Without a cooldown every commit carried its own.)
                self._unannounced.pop(queue, None)
                return
            self._unannounced[queue] = self._now()
            if queue in self._trailing:
                # One timer per quiet period, not one per commit: when it comes due it waits
                # again for whatever is left of the cooldown after the latest commit.
                return
            self._trailing[queue] = None
        if loop is None:
            self._arm(queue)
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed, and the store with it
            loop.call_soon_threadsafe(self._arm, queue)

    def _arm(self, queue: str) -> None:
        with self._lock:
            if self._closed or queue not in self._trailing or self._trailing[queue] is not None:
                return
            self._trailing[queue] = self._later(self.cooldown, queue)

    def _trail(self, queue: str) -> None:
        now = self._now()
        with self._lock:
            if self._closed:
                return
            since = self._unannounced.get(queue)
            if since is not None and since + self.cooldown > now:
                left = since + self.cooldown - now
                self._trailing[queue] = self._later(left, queue)
                return
            self._trailing.pop(queue, None)
            if since is None:  # a NOTIFY since covered every commit
                return
            del self._unannounced[queue]
            self._last[queue] = now
        self._fire(queue)

    def _fire(self, queue: str) -> None:
        task = asyncio.create_task(self._send(queue), name=f"caravel-notify-{queue}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, queue: str) -> None:
        try:
            async with self._engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.execute(_NOTIFY_ALONE, {"queue": queue})
        except (sa.exc.SQLAlchemyError, OSError) as exc:
            logger.debug(
                "could not send a wake-up; workers will find the job by polling",
                extra={"error_type": type(exc).__name__},
            )

    async def close(self) -> None:
        """Send the wake-ups still waiting, then let them finish."""
        with self._lock:
            self._closed = True
            timers = [timer for timer in self._trailing.values() if timer is not None]
            waiting = sorted(self._unannounced)
            self._trailing.clear()
            self._unannounced.clear()
        for timer in timers:
            timer.cancel()
        for queue in waiting:
            self._fire(queue)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


#: How long a listener waits for its own probe before it says LISTEN does not hold (seconds).
LISTEN_PROBE_SECONDS = 10.0
#: The payload prefix of a listener's probe; no queue is named so (queue names have no space).
_PROBE = "caravel probe "
_NOT_HELD = (
    "LISTEN does not hold on this connection (a pooler in transaction mode?): workers find "
    "jobs only by polling; add pool_mode=transaction to the URL and run workers polling-only"
)


async def listen(
    dsn: str,
    queues: frozenset[str],
    channel: str = CHANNEL,
    *,
    probe_within: float = LISTEN_PROBE_SECONDS,
) -> AsyncIterator[str]:
    """Queue names from NOTIFY on ``channel`` that are in ``queues``, over a dedicated
    connection to ``dsn`` outside the pool. A lost connection is re-opened after a pause;
    polling covers the gap.

    Once listening, it sends itself a probe NOTIFY from a connection of its own. Behind a
    pooler in transaction mode the LISTEN stayed on a server connection the pooler handed on,
    and a notification arriving there while no client holds it is dropped: when the probe is
    not heard within ``probe_within`` seconds, a WARNING says what to change (once). Once
    heard, it is not sent again."""
    settled = False
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(
                dsn, autocommit=True, **CONNECT_ARGS
            ) as conn:
                await conn.execute(f"LISTEN {channel}")
                probe = None if settled else await _send_probe(dsn, channel)
                while True:
                    async for note in conn.notifies(
                        timeout=None if probe is None else probe_within
                    ):
                        if note.payload == probe:
                            probe, settled = None, True
                            break
                        if note.payload in queues:
                            yield note.payload
                    if probe is not None:
                        logger.warning(_NOT_HELD, extra={"channel": channel})
                        probe, settled = None, True
        except psycopg.Error as exc:
            logger.warning(
                "wake-up listener lost its connection; polling until it is back",
                extra={"error_type": type(exc).__name__},
            )
        await asyncio.sleep(LISTEN_RETRY_SECONDS)


async def _send_probe(dsn: str, channel: str) -> str | None:
    """A probe NOTIFY on ``channel`` from a connection of its own; its payload, or ``None``
    when it could not be sent (then nothing is concluded)."""
    payload = f"{_PROBE}{uuid.uuid4().hex}"
    try:
        async with await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, **CONNECT_ARGS
        ) as conn:
            await conn.execute("SELECT pg_notify(%s, %s)", (channel, payload), prepare=False)
    except psycopg.Error:
        return None
    return payload
