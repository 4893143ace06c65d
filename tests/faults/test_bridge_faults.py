"""The broker bridges under faults, as real ``caravel bridge`` processes against the shared
RabbitMQ, on PostgreSQL and SQLite:

* SIGKILL at each failpoint: the relay before publishing and after the broker's confirm (before
  recording), the consumer before the jobs' commit and after it (before acknowledging); then a
  clean process finishes the work.
* Connection resets mid-stream: the server closes the processes' connections (only theirs,
  never the shared server's others) again and again while messages and intents flow.

The checker, every time: every intent reached the broker, duplicates only of the intents the
documented crash window left unrecorded and always under the same message id and body; every
message is exactly one job; nothing was acknowledged to the broker that the database did not
commit; nothing went to the dead letters.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from caravel import DispatchOptions
from tests.support.apps.workload import Nap, registry
from tests.support.bridge import (
    TABLE,
    AppDb,
    app_database,
    ended,
    finish,
    queue_rows,
    run,
    start,
)
from tests.support.processes import wait_until
from tests.support.rabbitmq import (
    RABBITMQ_URL,
    Names,
    RawMessage,
    close_connections_of,
    exists,
    fresh_names,
    held,
    publish_raw,
    read_all,
)

pytestmark = pytest.mark.slow

APP = "tests.support.apps.workload:registry"


@pytest.fixture
def names() -> Iterator[Names]:
    with fresh_names() as made:
        yield made


@pytest.fixture
def app_db(backend: str, tmp_path: Path) -> Iterator[AppDb]:
    with app_database(backend, tmp_path) as db:
        yield db


def stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    code, _, err = finish(process)
    assert code == 0, err
    return err


def publish_args(app_db: AppDb, names: Names) -> list[str]:
    return [
        "publish",
        "--broker",
        RABBITMQ_URL,
        "--app-url",
        app_db.url,
        "--table",
        TABLE,
        "--route",
        f"*={names.exchange}/naps.done",
        "--poll-interval",
        "0.05",
        "--batch-size",
        "10",
        "--outage-window",
        "120",
        "--progress",
        "0",
    ]


def consume_args(db_url: str, names: Names) -> list[str]:
    return [
        "consume",
        "--broker",
        RABBITMQ_URL,
        "--url",
        db_url,
        "--app",
        APP,
        "--source",
        names.queue,
        "--bind",
        f"{names.exchange}:naps.new",
        "--route",
        "naps.#=tests.nap.v1@naps",
        "--prefetch",
        "20",
        "--batch-size",
        "10",
        "--outage-window",
        "120",
        "--progress",
        "0",
    ]


def stage(app_db: AppDb, count_: int, offset: int = 0) -> list[UUID]:
    return app_db.stage(
        registry,
        [(Nap(0, label=f"n{offset + i}"), DispatchOptions(queue="naps")) for i in range(count_)],
    )


def messages(start_at: int, count_: int) -> list[tuple[str, str, bytes, dict[str, str]]]:
    return [
        (
            "naps.new",
            f"msg-{i}",
            json.dumps({"seconds": 0, "label": f"m{i}"}).encode(),
            {"caravel-tenant": "t"},
        )
        for i in range(start_at, start_at + count_)
    ]


# ----- the checkers ------------------------------------------------------------------------


def check_egress(app_db: AppDb, delivered: list[RawMessage], may_repeat: set[str]) -> None:
    """Every intent dispatched and at the broker; a repeat only where allowed, identical."""
    envelopes = app_db.envelopes()
    assert all(row.dispatched_at is not None for row in envelopes.values())
    ids = Counter(m.message_id for m in delivered)
    assert set(ids) == {str(i) for i in envelopes}
    repeated = {i for i, n in ids.items() if n > 1}
    assert repeated <= may_repeat, repeated - may_repeat
    for message in delivered:
        envelope = envelopes[UUID(message.message_id)]
        assert message.body == envelope.payload.encode()


def check_ingress(db_url: str, names: Names, expected: set[str]) -> None:
    """Exactly one job per message; the broker holds nothing; nothing dead-lettered."""
    keys = Counter(row.idempotency_key for row in queue_rows(db_url))
    assert set(keys) == expected
    assert max(keys.values()) == 1
    assert held(names.queue) == 0
    assert held(names.dead_letters) == 0


# ----- crashes -----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
@pytest.mark.parametrize("point", ["bridge_before_publish", "bridge_after_confirm"])
def test_relay_killed_around_the_confirm(
    app_db: AppDb, names: Names, point: str, backend: str
) -> None:
    asyncio.run(names.declare_sink())
    stage(app_db, 35)
    code, _, err = finish(start(publish_args(app_db, names), failpoint=point))
    assert code == -signal.SIGKILL, err
    assert app_db.pending() == 35  # nothing recorded
    # Before publishing nothing was sent; after the confirm, the first batch is at the broker.
    first = asyncio.run(read_all(names.sink))
    assert len(first) == (0 if point == "bridge_before_publish" else 10)
    clean = start(publish_args(app_db, names))
    wait_until(lambda: app_db.pending() == 0, timeout=60, what="every intent dispatched")
    stop(clean)
    later = asyncio.run(read_all(names.sink))
    assert len(later) == 35
    # The confirmed, unrecorded batch is sent again under the same ids: the documented window.
    assert {m.message_id for m in first} <= {m.message_id for m in later}
    check_egress(app_db, first + later, may_repeat={m.message_id or "" for m in first})


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
@pytest.mark.parametrize("point", ["bridge_before_commit", "bridge_after_commit"])
def test_consumer_killed_around_the_commit(
    db_url: str, names: Names, point: str, backend: str
) -> None:
    # Declare the topology first (one quiet pass), then queue the messages.
    declared = run([*consume_args(db_url, names), "--once"])
    assert declared.returncode == 0, declared.stderr
    asyncio.run(publish_raw(names.exchange, messages(0, 40)))
    code, _, err = finish(start(consume_args(db_url, names), failpoint=point))
    assert code == -signal.SIGKILL, err
    committed = len(queue_rows(db_url))
    # Nothing acknowledged that the database did not commit: the broker holds every message
    # again (the dead connection's deliveries went back to the queue).
    wait_until(lambda: held(names.queue) == 40, timeout=30, what="the deliveries given back")
    if point == "bridge_before_commit":
        assert committed == 0
    else:
        assert 1 <= committed <= 10  # one pass: what had arrived when it fetched
    clean = start(consume_args(db_url, names))
    wait_until(lambda: held(names.queue) == 0, timeout=60, interval=0.5, what="all settled")
    err = stop(clean)
    check_ingress(db_url, names, {f"msg-{i}" for i in range(40)})
    assert f"{40 - committed} enqueued, {committed} already enqueued, 0 rejected" in err


# ----- connection resets -------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_connection_resets_mid_stream_lose_and_double_nothing(
    db_url: str, app_db: AppDb, names: Names
) -> None:
    asyncio.run(names.declare_sink("naps.done"))
    relay = start(publish_args(app_db, names))
    ingest = start(consume_args(db_url, names))
    try:
        wait_until(lambda: exists(names.queue), what="the consumer's queue")
        sent = 0
        for _ in range(3):
            stage(app_db, 60, offset=sent)
            asyncio.run(publish_raw(names.exchange, messages(sent, 60)))
            sent += 60
            time.sleep(0.3)  # let some flow first: the reset comes mid-stream
            for process in (relay, ingest):
                # Each time the process has reconnected (aio-pika's robust connection).
                wait_until(
                    lambda p=process: close_connections_of(p.pid) > 0,
                    timeout=60,
                    interval=0.5,
                    what="a connection of the process to reset",
                )
        wait_until(lambda: app_db.pending() == 0, timeout=120, what="every intent dispatched")
        wait_until(
            lambda: len(queue_rows(db_url)) == sent and held(names.queue) == 0,
            timeout=120,
            interval=0.5,
            what="every message a job and settled",
        )
        stop(relay)
        stop(ingest)
    finally:
        ended(relay, ingest)
    delivered = asyncio.run(read_all(names.sink))
    # A reset can take confirms with it: those intents are sent again, same id, same body.
    check_egress(app_db, delivered, may_repeat={m.message_id or "" for m in delivered})
    check_ingress(db_url, names, {f"msg-{i}" for i in range(sent)})
