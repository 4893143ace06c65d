"""``caravel bridge publish`` and ``caravel bridge consume --broker nats://...`` as real processes
against the shared NATS server: running until SIGTERM and stopping cleanly with the counts, one
pass with ``--json``, the NATS flags, and their refusal for another broker."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from caravel import DispatchOptions
from caravel.bridge import Destination, OutgoingMessage
from caravel.bridge.nats import HEADER_MSG_ID, open_broker
from tests.support.apps.workload import Nap, registry
from tests.support.bridge import TABLE, AppDb, app_database, ended, finish, queue_rows, run, start
from tests.support.jetstream import (
    ScratchNames,
    consumer_info,
    delete_stream,
    read_stream,
    require_nats,
    scratch_names,
)
from tests.support.processes import wait_until

pytestmark = pytest.mark.slow

APP = "tests.support.apps.workload:registry"


@pytest.fixture
def jet() -> Iterator[ScratchNames]:
    url = require_nats()
    names = scratch_names("cli")
    yield names
    delete_stream(url, names.stream)
    delete_stream(url, f"{names.stream}_DLQ")


@pytest.fixture(params=("sqlite", "postgresql"))
def app_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AppDb]:
    with app_database(request.param, tmp_path) as db:
        yield db


def stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGTERM, as a supervisor stops it; its exit code and stderr."""
    process.send_signal(signal.SIGTERM)
    code, _, err = finish(process)
    return code, err


def consume_args(jet: ScratchNames, db_url: str, *extra: str) -> list[str]:
    return [
        "consume",
        "--broker",
        require_nats(),
        "--url",
        db_url,
        "--app",
        APP,
        "--source",
        f"{jet.stream}:{jet.durable}",
        "--stream",
        jet.stream,
        "--subject",
        jet.subject("*"),
        "--route",
        f"{jet.subject('naps')}=tests.nap.v1@naps",
        "--ack-wait",
        "5",
        *extra,
    ]


async def publish(jet: ScratchNames, *messages: tuple[str, bytes, dict[str, str]]) -> None:
    broker = await open_broker(require_nats(), stream=jet.stream, subjects=(jet.subject("*"),))
    try:
        batch = [
            OutgoingMessage(message_id, Destination(jet.subject("naps")), body, headers)
            for message_id, body, headers in messages
        ]
        assert await (await broker.publisher()).publish(batch) == []
    finally:
        await broker.close()


def nap(i: int) -> tuple[str, bytes, dict[str, str]]:
    body = json.dumps({"seconds": 0, "label": f"nap-{i}"}).encode()
    return (f"msg-{i}", body, {"caravel-tenant": "t"})


def settled(jet: ScratchNames) -> bool:
    info = asyncio.run(consumer_info(require_nats(), jet.stream, jet.durable))
    return bool(info.num_pending == 0 and info.num_ack_pending == 0)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_consume_runs_until_sigterm_and_stops_with_its_counts(
    jet: ScratchNames, db_url: str
) -> None:
    asyncio.run(publish(jet, *[nap(i) for i in range(20)], ("bad", b"{", {"caravel-tenant": "t"})))
    process = start(consume_args(jet, db_url, "--progress", "0.2"))
    try:
        wait_until(lambda: len(queue_rows(db_url)) == 20, what="20 jobs")
        # The same messages again under new stream sequences (a publisher outside the duplicate
        # window): no new job.
        again = [
            (f"msg-{i}", body, headers) for i, (_, body, headers) in enumerate(map(nap, range(5)))
        ]
        asyncio.run(publish(jet, *[(m, b, {**h, "x": "1"}) for m, b, h in again]))
        wait_until(lambda: settled(jet), what="the consumer settled everything", interval=0.3)
        code, err = stop(process)
    finally:
        ended(process)
    assert code == 0, err
    assert f"consuming {jet.stream}:{jet.durable} from nats://127.0.0.1:4222" in err
    # Within the duplicate window the re-sent ids were dropped by the stream itself: nothing
    # to count; the one bad message went to the dead letters.
    assert err.strip().splitlines()[-1] == (
        "caravel bridge consume: stopped; 20 enqueued, 0 already enqueued, 1 rejected"
    )
    rows = queue_rows(db_url)
    assert {(r.queue, r.tenant_id, r.job_type) for r in rows} == {("naps", "t", "tests.nap.v1")}
    (dead,) = asyncio.run(read_stream(require_nats(), f"{jet.stream}_DLQ"))
    assert dead.subject == jet.subject("naps.dlq")
    assert dead.headers["caravel-failure"] == "MalformedJson"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_consume_once_as_json(jet: ScratchNames, db_url: str) -> None:
    first = run(consume_args(jet, db_url, "--once", "--json"))  # declares stream and consumer
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {
        "event": "stopped",
        "enqueued": 0,
        "already_enqueued": 0,
        "rejected": 0,
    }
    asyncio.run(publish(jet, nap(1)))
    done = run(consume_args(jet, db_url, "--once", "--json"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["enqueued"] == 1


def test_publish_runs_until_sigterm_and_every_intent_arrives_once(
    app_db: AppDb, jet: ScratchNames
) -> None:
    staged = app_db.stage(
        registry, [(Nap(0, label=f"n{i}"), DispatchOptions(queue="naps")) for i in range(30)]
    )
    process = start(
        [
            "publish",
            "--broker",
            require_nats(),
            "--app-url",
            app_db.url,
            "--table",
            TABLE,
            "--route",
            f"*={jet.subject('done')}",
            "--stream",
            jet.stream,
            "--subject",
            jet.subject("*"),
            "--duplicate-window",
            "120",
            "--poll-interval",
            "0.05",
            "--batch-size",
            "7",
            "--progress",
            "0.2",
        ]
    )
    try:
        wait_until(lambda: app_db.pending() == 0, what="every intent dispatched")
        code, err = stop(process)
    finally:
        ended(process)
    assert code == 0, err
    assert err.strip().splitlines()[-1] == (
        "caravel bridge publish: stopped; 30 published, 0 undeliverable"
    )
    held = asyncio.run(read_stream(require_nats(), jet.stream))
    assert sorted(m.headers[HEADER_MSG_ID] for m in held) == sorted(str(i) for i in staged)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_nats_flags_are_checked_and_refused_for_another_broker(
    jet: ScratchNames, db_url: str
) -> None:
    bad_window = run(consume_args(jet, db_url, "--duplicate-window", "0", "--once"))
    assert bad_window.returncode == 2
    assert "--duplicate-window" in bad_window.stderr
    reads_its_dead_letters = run(
        [*consume_args(jet, db_url, "--once"), "--filter-subject", jet.subject(">")]
    )
    assert reads_its_dead_letters.returncode == 2
    assert "--dead-letter-subject" in reads_its_dead_letters.stderr
    on_rabbitmq = run(
        [*consume_args(jet, db_url, "--once"), "--broker", "amqp://guest:guest@127.0.0.1:5672/"]
    )
    assert on_rabbitmq.returncode == 2
    assert "for nats:// brokers only" in on_rabbitmq.stderr
    unreachable = run([*consume_args(jet, db_url, "--json"), "--broker", "nats://127.0.0.1:1"])
    assert unreachable.returncode == 1
    error = json.loads(unreachable.stderr.strip().splitlines()[-1])["error"]
    assert error["type"] == "BrokerError"
