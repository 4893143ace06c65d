"""The autoscaling signal over real HTTP: a real uvicorn serving :func:`caravel.web.metrics_app`
and the dashboard's ``/metrics``, on every database, with the queue's clock stood still and
moved by the test (the oldest job's age and the last minute are judged at its time)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import httpx
import pytest

from caravel.errors import ValidationError
from caravel.flow import ConcurrencyLimit
from caravel.store import open_store
from caravel.store.protocol import Heartbeat, Store, WorkerRecord
from caravel.testing import ManualClock
from caravel.web import dashboard, metrics_app
from tests.store.conformance.builders import claim, claim_one, insert, new_job
from tests.support.dashboard.fixtures import USER_HEADER, authorize
from tests.support.dashboard.server import serving

pytestmark = pytest.mark.slow  # a real server per test

START = datetime(2030, 1, 1, tzinfo=UTC)
T = int(START.timestamp() * 1000)
SECOND = 1_000


@dataclass
class Queue:
    url: str
    clock: ManualClock


@pytest.fixture
async def queue(db_url: str) -> Queue:
    """``emails``: three due jobs (the oldest due 30 s ago) and one delayed. ``reports``: one
    job running (lease until T+29 s), one finished 20 s ago and one 70 s ago. ``tenants``: one
    per partition key may run; key ``a`` has one running and one waiting. One worker serving
    emails and reports was heard from 5 s ago, another 2 minutes ago."""
    store: Store = open_store(db_url).inner
    try:
        await _seed(store)
    finally:
        await store.close()
    return Queue(db_url, ManualClock(START))


async def _seed(store: Store) -> None:
    await insert(
        store,
        [
            new_job(1, queue="emails", created_at=T - 30 * SECOND),
            new_job(2, queue="emails", created_at=T - 10 * SECOND),
            new_job(3, queue="emails", created_at=T - 5 * SECOND),
            new_job(4, queue="emails", created_at=T - 5 * SECOND, due_at=T + 60 * SECOND),
        ],
    )
    for finished_at in (T - 70 * SECOND, T - 20 * SECOND):
        await insert(store, [new_job(finished_at, queue="reports", created_at=finished_at - 1)])
        lease = (await claim_one(store, finished_at - 1, queue="reports")).lease
        assert len(await store.job_complete_many([lease], finished_at)) == 1
    await insert(store, [new_job(9, queue="reports", created_at=T - 2 * SECOND)])
    await claim_one(store, T - SECOND, queue="reports", lease_ms=30 * SECOND)

    await store.queue_limit_set(ConcurrencyLimit(queue="tenants", per_key=1), T - 60 * SECOND)
    await insert(
        store,
        [
            new_job(10, queue="tenants", created_at=T - 9 * SECOND, partition_key="a"),
            new_job(11, queue="tenants", created_at=T - 8 * SECOND, partition_key="a"),
        ],
    )
    batch = await claim(store, T - 3 * SECOND, 1, queue="tenants", limited=True)
    assert len(batch.claimed) == 1

    heard = _worker(T - 100 * SECOND, ("emails", "reports"))
    gone = _worker(T - 200 * SECOND, ("emails",))
    await store.worker_register(heard)
    await store.worker_register(gone)
    await store.worker_heartbeat(Heartbeat(heard.id, T - 5 * SECOND, 1))
    await store.worker_heartbeat(Heartbeat(gone.id, T - 120 * SECOND, 0))


def _worker(started_at: int, queues: tuple[str, ...]) -> WorkerRecord:
    return WorkerRecord(uuid4(), "host.example", 4242, queues, 4, started_at, started_at, 0)


def _by_queue(document: dict[str, list[dict[str, object]]]) -> dict[str, dict[str, object]]:
    return {row.pop("queue"): row for row in document["queues"]}  # type: ignore[misc]


async def test_the_signal_per_queue_as_json_then_a_minute_later(queue: Queue) -> None:
    with serving(metrics_app(queue.url, clock=queue.clock)) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            answer = await client.get("/metrics")
            assert answer.status_code == 200
            assert answer.headers["content-type"] == "application/json"
            assert _by_queue(answer.json()) == {
                "emails": {
                    "ready": 3,
                    "running": 0,
                    "oldest_ready_age_seconds": 30.0,
                    "finished_last_minute": 0,
                    "workers": 1,
                    "limits": None,
                },
                "reports": {
                    "ready": 0,
                    "running": 1,
                    "oldest_ready_age_seconds": 0.0,
                    "finished_last_minute": 1,
                    "workers": 1,
                    "limits": None,
                },
                "tenants": {
                    "ready": 1,
                    "running": 1,
                    "oldest_ready_age_seconds": 8.0,
                    "finished_last_minute": 0,
                    "workers": 0,
                    "limits": {
                        "concurrency": None,
                        "per_key": 1,
                        "running": 1,
                        "waiting": 1,
                        "keys": [{"key": "a", "running": 1, "waiting": 1}],
                    },
                },
            }

            await queue.clock.advance(timedelta(seconds=60))
            later = _by_queue((await client.get("/metrics")).json())
            # The delayed job fell due; the lease and the worker's heartbeat ran out.
            assert later["emails"]["ready"] == 4
            assert later["emails"]["oldest_ready_age_seconds"] == 90.0
            assert later["emails"]["workers"] == 0
            assert later["reports"]["running"] == 0
            assert later["reports"]["finished_last_minute"] == 0


async def test_one_queue_and_the_prometheus_text(queue: Queue) -> None:
    with serving(metrics_app(queue.url, clock=queue.clock)) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            one = await client.get("/metrics", params={"queue": "emails"})
            assert [row["queue"] for row in one.json()["queues"]] == ["emails"]
            idle = await client.get("/metrics", params={"queue": "idle"})
            assert idle.json()["queues"] == [
                {
                    "queue": "idle",
                    "ready": 0,
                    "running": 0,
                    "oldest_ready_age_seconds": 0.0,
                    "finished_last_minute": 0,
                    "workers": 0,
                    "limits": None,
                }
            ]

            scrape = await client.get(
                "/metrics",
                headers={"accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"},
            )
            asked = await client.get("/metrics", params={"format": "prometheus"})
    for text in (scrape, asked):
        assert text.status_code == 200
        assert text.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        lines = text.text.splitlines()
        assert "# TYPE caravel_queue_ready gauge" in lines
        assert 'caravel_queue_ready{queue="emails"} 3' in lines
        assert 'caravel_queue_oldest_ready_age_seconds{queue="emails"} 30.0' in lines
        assert 'caravel_queue_finished_last_minute{queue="reports"} 1' in lines
        assert 'caravel_queue_workers{queue="reports"} 1' in lines
        assert 'caravel_queue_limit_waiting{queue="tenants"} 1' in lines
        assert 'caravel_partition_running{queue="tenants",key="a"} 1' in lines


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"queue": "Not A Queue"}, "queue: must be 1 to 64 characters"),
        ({"format": "xml"}, "format: must be json or prometheus"),
        ({"keys": "-1"}, "keys: must be a whole number from 0 to 1000"),
        ({"keys": "1001"}, "keys: must be a whole number from 0 to 1000"),
    ],
)
async def test_bad_parameters_get_one_line_errors(
    queue: Queue, params: dict[str, str], message: str
) -> None:
    with serving(metrics_app(queue.url, clock=queue.clock)) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            answer = await client.get("/metrics", params=params)
    assert answer.status_code == 400
    assert answer.text.count("\n") == 1
    error = answer.json()["error"]
    assert error["type"] == "ValidationError"
    assert error["message"].startswith(message)


async def _status(
    client: httpx.AsyncClient, path: str = "/metrics", method: str = "GET", **headers: str
) -> int:
    return (await client.request(method, path, headers=headers)).status_code


async def test_who_may_read_it_alone(queue: Queue) -> None:
    with serving(metrics_app(queue.url, clock=queue.clock)) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            assert await _status(client) == 200
            assert await _status(client, **{"x-forwarded-for": "203.0.113.5"}) == 403
            assert await _status(client, host="evil.example") == 403
            assert await _status(client, "/") == 404
            assert await _status(client, method="POST") == 405
    with serving(metrics_app(queue.url, authorize=authorize, clock=queue.clock)) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            assert await _status(client) == 401
            assert await _status(client, **{USER_HEADER: "outsider"}) == 403
            reader = await client.get("/metrics", headers={USER_HEADER: "reader"})
            assert reader.status_code == 200
            assert len(reader.json()["queues"]) == 3


async def test_the_dashboard_serves_it_to_readers(queue: Queue) -> None:
    app = dashboard(queue.url, authorize=authorize, clock=queue.clock)
    with serving(app) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            assert await _status(client) == 401
            assert await _status(client, **{USER_HEADER: "outsider"}) == 403
            reader = await client.get("/metrics", headers={USER_HEADER: "reader"})
            assert reader.status_code == 200
            assert _by_queue(reader.json())["emails"]["ready"] == 3
            text = await client.get(
                "/metrics", params={"format": "prometheus"}, headers={USER_HEADER: "reader"}
            )
    assert 'caravel_queue_ready{queue="emails"} 3' in text.text.splitlines()


async def _ready(client: httpx.AsyncClient) -> int:
    found = (await client.get("/metrics", params={"queue": "emails"})).json()["queues"]
    return int(found[0]["ready"])


async def _one_more_due(url: str) -> None:
    store: Store = open_store(url).inner
    try:
        await insert(store, [new_job(20, queue="emails", created_at=T - SECOND)])
    finally:
        await store.close()


async def test_a_signal_read_less_than_max_age_ago_is_answered_again(queue: Queue) -> None:
    with serving(metrics_app(queue.url, clock=queue.clock)) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            assert await _ready(client) == 3
            await _one_more_due(queue.url)
            await queue.clock.advance(timedelta(milliseconds=999))
            assert await _ready(client) == 3  # read 0.999 s ago: answered again
            await queue.clock.advance(timedelta(milliseconds=1))
            assert await _ready(client) == 4  # a second old: read again


async def test_max_age_zero_reads_for_every_request(queue: Queue) -> None:
    app = metrics_app(queue.url, clock=queue.clock, max_age=timedelta(0))
    with serving(app) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            assert await _ready(client) == 3
            await _one_more_due(queue.url)
            assert await _ready(client) == 4


async def test_the_dashboard_answers_from_its_own_max_age(queue: Queue) -> None:
    app = dashboard(
        queue.url, authorize=authorize, clock=queue.clock, metrics_max_age=timedelta(seconds=5)
    )
    with serving(app) as base:
        async with httpx.AsyncClient(base_url=base, headers={USER_HEADER: "reader"}) as client:
            assert await _ready(client) == 3
            await _one_more_due(queue.url)
            await queue.clock.advance(timedelta(seconds=4))
            assert await _ready(client) == 3
            await queue.clock.advance(timedelta(seconds=1))
            assert await _ready(client) == 4


@pytest.mark.parametrize("max_age", [timedelta(seconds=-1), timedelta(minutes=5, seconds=1), 1])
def test_a_bad_max_age_is_refused_naming_it(max_age: object) -> None:
    with pytest.raises(ValidationError, match=r"^max_age: "):
        metrics_app("sqlite:///unused.db", max_age=max_age)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"^metrics_max_age: "):
        dashboard("sqlite:///unused.db", metrics_max_age=max_age)  # type: ignore[arg-type]
