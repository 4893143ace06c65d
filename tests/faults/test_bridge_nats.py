"""The bridges over NATS JetStream under faults: a relay or a consumer process SIGKILLed at the
failpoints between the broker and the database (``bridge_after_confirm``: the PubAck came, the
intent is not recorded; ``bridge_after_commit``: the jobs committed, nothing is acknowledged),
in the reverse order (``bridge_before_publish``, ``bridge_before_commit``) and at random moments
(mid-publish, mid-transaction), and the throwaway ``nats-server`` SIGKILLed and restarted over
its store mid-stream.

The checker: every intent delivered, and the stream holds each intent's id exactly once (the
re-sends after a kill were dropped by JetStream's duplicate window); every ingested message
exactly one job; and, after every kill, nothing recorded as published that the stream does not
hold, nothing acknowledged whose job the database did not commit."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from caravel.bridge import Destination, OutgoingMessage
from caravel.bridge.messages import HEADER_TENANT
from caravel.bridge.nats import HEADER_MSG_ID, open_broker
from caravel.errors import BrokerError
from tests.faults.natsserver import PrivateNats
from tests.support import Add, dispatch, make_registry
from tests.support.bridge import TABLE, AppDb, app_database, queue_rows
from tests.support.jetstream import (
    ScratchNames,
    consumer_info,
    delete_stream,
    read_stream,
    scratch_names,
)

pytestmark = [pytest.mark.slow, pytest.mark.serial]

ROOT = Path(__file__).resolve().parents[2]
#: Intents staged, and messages published, while the rounds run: a batch every ``FEED_PAUSE``
#: seconds, so that every round finds work and the broker restarts mid-stream.
FEED_BATCH = 10
FEED_PAUSE = 0.15
#: The rounds a process runs in: a failpoint kill, then a kill at a random moment, in turn;
#: the broker is restarted under the process of these rounds.
ROUNDS = 8
BROKER_RESTARTS = (3, 7)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def names() -> ScratchNames:
    return scratch_names("fault")


class Bridge:
    """One bridge process of :mod:`tests.faults.bridge_nats_app`, its output appended to
    ``log``; ``failpoint`` kills it there."""

    def __init__(self, role: str, args: list[str], log: Path, failpoint: str | None) -> None:
        env = {k: v for k, v in os.environ.items() if k != "CARAVEL_FAILPOINT"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
        if failpoint:
            env["CARAVEL_FAILPOINT"] = failpoint
        self.log = log
        self._offset = log.stat().st_size if log.exists() else 0
        with log.open("a", encoding="utf-8") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.bridge_nats_app", role, *args],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                text=True,
            )

    def ready(self) -> bool:
        """Whether it said it runs (its SIGTERM handler is in place from then on)."""
        with self.log.open("rb") as out:
            out.seek(self._offset)
            return b"ing\n" in out.read()

    def finish(self, done: Callable[[], bool], timeout: float = 120.0) -> None:
        """Let it run until ``done()`` holds, then stop it with SIGTERM: it exits 0."""
        deadline = time.monotonic() + timeout
        while not (self.ready() and done()) and time.monotonic() < deadline:
            assert self.process.poll() is None, f"it exited {self.process.returncode}"
            time.sleep(0.1)
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(timeout=30) == 0, _log_tail(self.log)
        assert done(), "the bridge did not finish in time"


def _round(
    bridge: Bridge,
    server: PrivateNats,
    *,
    failpoint: bool,
    restart_broker: bool,
    rng: random.Random,
) -> str:
    """Let the bridge run until its failpoint kills it, or SIGKILL it at a random moment;
    restart the broker under it when asked. How it ended."""
    process = bridge.process
    deadline = time.monotonic() + 30
    while not bridge.ready() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if restart_broker:
        time.sleep(rng.uniform(0.1, 0.5))
        server.restart(signal.SIGKILL, down_for=rng.uniform(0.1, 1.0))
    deadline = time.monotonic() + (20.0 if failpoint else rng.uniform(0.2, 1.5))
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if process.poll() is None:
        process.kill()
        process.wait(timeout=30)
        return "killed"
    return "failpoint" if process.returncode == -signal.SIGKILL else f"exit {process.returncode}"


def _rounds(
    role: str,
    args: list[str],
    log: Path,
    failpoints: tuple[str, str],
    server: PrivateNats,
    rng: random.Random,
    check: Callable[[], None],
) -> None:
    """``ROUNDS`` bridge processes in turn, every other one with one of ``failpoints`` (after
    the broker's acknowledgement and before the database's record or commit, then the reverse
    order) and the others SIGKILLed at a random moment, the broker restarted under some;
    ``check`` after each, with nothing running. Most failpoint rounds must have reached it."""
    endings: list[str] = []
    for number in range(ROUNDS):
        hit = number % 2 == 0
        bridge = Bridge(role, args, log, failpoints[number // 2 % 2] if hit else None)
        restart = number in BROKER_RESTARTS
        endings.append(_round(bridge, server, failpoint=hit, restart_broker=restart, rng=rng))
        server.ensure_running()
        check()
    assert endings.count("failpoint") >= ROUNDS // 2 - 1, (endings, _log_tail(log))


class Feeder(threading.Thread):
    """Calls ``feed(start, FEED_BATCH)`` every ``FEED_PAUSE`` seconds until :meth:`finish`, so
    that every round finds work; ``feed`` rides out broker restarts itself."""

    def __init__(self, feed: Callable[[int, int], None]) -> None:
        super().__init__(daemon=True)
        self._feed = feed
        self._halt = threading.Event()
        self.fed = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                self._feed(self.fed, FEED_BATCH)
                self.fed += FEED_BATCH
                self._halt.wait(FEED_PAUSE)
        except BaseException as exc:
            self.error = exc

    def finish(self) -> int:
        """Stop feeding; how many items were fed."""
        self._halt.set()
        self.join(timeout=120)
        assert self.error is None, repr(self.error)
        assert not self.is_alive()
        return self.fed


def _log_tail(log: Path) -> str:
    return log.read_text(encoding="utf-8", errors="replace")[-3000:]


# ----- egress ------------------------------------------------------------------------------


def _stream_ids(url: str, stream: str) -> list[str]:
    return [m.headers[HEADER_MSG_ID] for m in asyncio.run(read_stream(url, stream))]


def _dispatched(app: AppDb) -> set[str]:
    return {str(i) for i, row in app.envelopes().items() if row.dispatched_at is not None}


async def _declare(url: str, stream: str, subjects: tuple[str, ...]) -> None:
    broker = await open_broker(url, stream=stream, subjects=subjects)
    await broker.close()


def test_relay_kills_and_broker_restarts_publish_every_intent_once(
    backend: str, nats_server: PrivateNats, names: ScratchNames, tmp_path: Path
) -> None:
    nats_server.ensure_running()
    rng = random.Random(37)
    registry = make_registry()
    asyncio.run(_declare(nats_server.url, names.stream, (names.subject("*"),)))
    with app_database(backend, tmp_path) as app:
        staged: set[str] = set()

        def stage(start: int, count: int) -> None:
            items = [(Add(i), dispatch(queue="out")) for i in range(start, start + count)]
            staged.update(str(i) for i in app.stage(registry, items))

        feeder = Feeder(stage)
        feeder.start()
        log = tmp_path / "relay.log"
        args = [nats_server.url, app.url, TABLE, names.subject("jobs")]

        def check() -> None:
            # Nothing recorded as published that the stream does not hold.
            held = set(_stream_ids(nats_server.url, names.stream))
            assert _dispatched(app) <= held, _log_tail(log)

        points = ("bridge_after_confirm", "bridge_before_publish")
        _rounds("egress", args, log, points, nats_server, rng, check)
        total = feeder.finish()
        Bridge("egress", args, log, None).finish(lambda: app.pending() == 0)
        ids = _stream_ids(nats_server.url, names.stream)
    # Every intent delivered, and the stream holds each id once: the re-sends after the
    # failpoint kills (PubAck received, nothing recorded) were dropped by the duplicate window.
    assert len(ids) == len(set(ids)) == total
    assert set(ids) == staged


# ----- ingress -----------------------------------------------------------------------------


def _job_keys(db_url: str) -> list[str]:
    return [row.idempotency_key for row in queue_rows(db_url)]


def _messages(start: int, count: int, subject: str) -> list[OutgoingMessage]:
    """Good messages ``in-<i>``; every 250th comes with a bad one (not JSON, no tenant)."""
    add = Destination(subject)
    tenant = {HEADER_TENANT: "tenant-f"}
    batch = []
    for i in range(start, start + count):
        batch.append(OutgoingMessage(f"in-{i}", add, f'{{"amount": {i}}}'.encode(), tenant))
        if i % 500 == 0:
            batch.append(OutgoingMessage(f"bad-json-{i}", add, b"{", tenant))
        if i % 500 == 250:
            batch.append(OutgoingMessage(f"bad-tenant-{i}", add, b'{"amount": 1}'))
    return batch


async def _publish_riding_out(url: str, messages: list[OutgoingMessage]) -> None:
    """Publish until every PubAck came, across broker restarts (a re-send is deduped)."""
    for _ in range(60):
        broker = None
        try:
            broker = await open_broker(url, publish_timeout=timedelta(seconds=2))
            if await (await broker.publisher()).publish(messages) == []:
                return
        except BrokerError:
            pass
        finally:
            if broker is not None:
                await broker.close()
        await asyncio.sleep(0.5)
    raise AssertionError("the feeder could not publish for 30 s")


def _acked(url: str, names: ScratchNames) -> set[str]:
    """The ids of the good messages the consumer's acknowledgement floor covers."""
    from nats.js.errors import NotFoundError

    try:
        info = asyncio.run(consumer_info(url, names.stream, names.durable))
    except NotFoundError:
        return set()
    floor = int(info.ack_floor.stream_seq)
    held = asyncio.run(read_stream(url, names.stream))
    return {
        m.headers[HEADER_MSG_ID]
        for m in held
        if m.seq <= floor and m.headers[HEADER_MSG_ID].startswith("in-")
    }


def test_consumer_kills_and_broker_restarts_make_one_job_per_message(
    db_url: str, nats_server: PrivateNats, names: ScratchNames, tmp_path: Path
) -> None:
    nats_server.ensure_running()
    rng = random.Random(41)
    asyncio.run(_declare(nats_server.url, names.stream, (names.subject("*"),)))
    subject = names.subject("add")

    def publish(start: int, count: int) -> None:
        asyncio.run(_publish_riding_out(nats_server.url, _messages(start, count, subject)))

    feeder = Feeder(publish)
    feeder.start()
    log = tmp_path / "consumer.log"
    args = [nats_server.url, db_url, f"{names.stream}:{names.durable}", subject]

    def check() -> None:
        # Nothing acknowledged whose job the database did not commit.
        assert _acked(nats_server.url, names) <= set(_job_keys(db_url)), _log_tail(log)

    points = ("bridge_after_commit", "bridge_before_commit")
    _rounds("ingress", args, log, points, nats_server, rng, check)

    def settled() -> bool:
        info = asyncio.run(consumer_info(nats_server.url, names.stream, names.durable))
        return bool(info.num_pending == 0 and info.num_ack_pending == 0)

    total = feeder.finish()
    Bridge("ingress", args, log, None).finish(settled)
    # Every message exactly one job, however often it was delivered; the bad ones are in the
    # dead letters once each (a repeat after a kill deduped by the dead-letter stream).
    keys = _job_keys(db_url)
    assert sorted(keys) == sorted(f"in-{i}" for i in range(total))
    dead = asyncio.run(read_stream(nats_server.url, f"{names.stream}_DLQ"))
    assert sorted(m.headers[HEADER_MSG_ID] for m in dead) == sorted(
        m.message_id for m in _messages(0, total, subject) if m.message_id.startswith("bad-")
    )


@pytest.fixture(autouse=True)
def _clean_streams(nats_server: PrivateNats, names: ScratchNames) -> Iterator[None]:
    yield
    nats_server.ensure_running()
    delete_stream(nats_server.url, names.stream)
    delete_stream(nats_server.url, f"{names.stream}_DLQ")
