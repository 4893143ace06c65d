"""``caravel bridge publish`` and ``caravel bridge consume`` as real processes against the shared
RabbitMQ: running until SIGTERM and stopping cleanly with the counts, one pass with ``--json``,
and the exit codes of a bad flag, a missing extra's scheme and an unreachable broker."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from caravel import DispatchOptions
from tests.acceptance.test_cli_json import EXAMPLES, same_shape
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


@pytest.fixture(params=("sqlite", "postgresql"))
def app_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AppDb]:
    with app_database(request.param, tmp_path) as db:
        yield db


def consume_args(names: Names, db_url: str, *extra: str) -> list[str]:
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
        f"{names.exchange}:naps.#",
        "--route",
        "naps.#=tests.nap.v1@naps",
        *extra,
    ]


def nap(i: int, tenant: str = "t") -> tuple[str, str, bytes, dict[str, str]]:
    body = json.dumps({"seconds": 0, "label": f"nap-{i}"}).encode()
    return ("naps.new", f"msg-{i}", body, {"caravel-tenant": tenant})


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_consume_runs_until_sigterm_and_stops_with_its_counts(names: Names, db_url: str) -> None:
    process = start(consume_args(names, db_url, "--progress", "0.2"))
    try:
        wait_until(lambda: exists(names.queue), what="the consumer's queue")
        messages = [nap(i) for i in range(20)] + [
            ("naps.new", "bad", b"{", {"caravel-tenant": "t"})
        ]
        asyncio.run(publish_raw(names.exchange, messages))
        wait_until(lambda: len(queue_rows(db_url)) == 20, what="20 jobs")
        # The same messages again (a publisher's retry): no new job.
        asyncio.run(publish_raw(names.exchange, messages[:5]))
        wait_until(lambda: held(names.queue) == 0, what="the queue drained", interval=0.5)
        process.send_signal(signal.SIGTERM)
        code, _, err = finish(process)
    finally:
        ended(process)
    assert code == 0, err
    assert f"consuming {names.queue} from amqp://127.0.0.1:5672/" in err
    assert "guest" not in err
    assert err.strip().splitlines()[-1] == (
        "caravel bridge consume: stopped; 20 enqueued, 5 already enqueued, 1 rejected"
    )
    rows = queue_rows(db_url)
    assert len(rows) == 20
    assert {(r.queue, r.tenant_id, r.job_type) for r in rows} == {("naps", "t", "tests.nap.v1")}
    (dead,) = asyncio.run(read_all(names.dead_letters))
    assert dead.headers["caravel-failure"] == "MalformedJson"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_consume_once_as_json(names: Names, db_url: str) -> None:
    first = run(consume_args(names, db_url, "--once", "--json"))  # declares the topology
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {
        "event": "stopped",
        "enqueued": 0,
        "already_enqueued": 0,
        "rejected": 0,
    }
    asyncio.run(publish_raw(names.exchange, [nap(1)]))
    done = run(consume_args(names, db_url, "--once", "--json"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["enqueued"] == 1
    same_shape(EXAMPLES["caravel bridge consume"], json.loads(done.stdout))


def test_publish_runs_until_sigterm_and_every_intent_arrives(app_db: AppDb, names: Names) -> None:
    asyncio.run(names.declare_sink())
    staged = app_db.stage(
        registry, [(Nap(0, label=f"n{i}"), DispatchOptions(queue="naps")) for i in range(30)]
    )
    process = start(
        [
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
            "7",
            "--progress",
            "0.2",
        ]
    )
    try:
        wait_until(lambda: app_db.pending() == 0, what="every intent dispatched")
        process.send_signal(signal.SIGTERM)
        code, _, err = finish(process)
    finally:
        ended(process)
    assert code == 0, err
    assert err.strip().splitlines()[-1] == (
        "caravel bridge publish: stopped; 30 published, 0 undeliverable"
    )
    delivered = asyncio.run(read_all(names.sink))
    assert sorted(m.message_id for m in delivered) == sorted(str(i) for i in staged)


@pytest.mark.parametrize("app_db", ["sqlite"], indirect=True)
def test_publish_once_as_json(app_db: AppDb, names: Names) -> None:
    asyncio.run(names.declare_sink())
    app_db.stage(registry, [(Nap(0), DispatchOptions(queue="naps")) for _ in range(3)])
    done = run(
        [
            "publish",
            "--broker",
            RABBITMQ_URL,
            "--app-url",
            app_db.url,
            "--table",
            TABLE,
            "--route",
            f"queue:naps={names.exchange}/naps.done",
            "--once",
            "--json",
        ]
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"event": "stopped", "published": 3, "undeliverable": 0}
    same_shape(EXAMPLES["caravel bridge publish"], json.loads(done.stdout))


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_exit_codes(db_url: str, names: Names) -> None:
    bad_scheme = run([*consume_args(names, db_url), "--broker", "kafka://h:9092"])
    assert bad_scheme.returncode == 2
    assert "--broker" in bad_scheme.stderr or "broker" in bad_scheme.stderr
    bad_route = run([*consume_args(names, db_url), "--route", "x=tests.missing.v1"])
    assert bad_route.returncode == 2
    assert "not registered" in bad_route.stderr
    unreachable = run(
        [*consume_args(names, db_url), "--broker", "amqp://guest:secret@127.0.0.1:1/", "--json"]
    )
    assert unreachable.returncode == 1
    error = json.loads(unreachable.stderr.strip().splitlines()[-1])["error"]
    assert error["type"] == "BrokerError"
    assert "secret" not in unreachable.stderr
