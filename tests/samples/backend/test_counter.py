"""The counter API: submissions, idempotency keys, ownership, results, summaries and queue
failures, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import httpx
import pytest
import sqlalchemy as sa
from caravel_samples.backend.jobs import QUEUE
from caravel_samples.backend.settings import Settings

from caravel import DatabaseQueue, DispatchOptions, EnqueueResult, StoreError
from tests.samples.backend.support import Browser, Running, add_user, count_rows, drain, running


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def _signed_in(run: Running, settings: Settings, email: str) -> Browser:
    await add_user(settings, email)
    browser = run.browser()
    await browser.sign_in(email)
    return browser


async def test_an_accepted_event_is_a_saved_job_owned_by_the_user(settings: Settings) -> None:
    async with running(settings) as run:
        alice = await _signed_in(run, settings, "alice@example.com")
        response = await alice.submit("event-001", 5, tenantId="evil-tenant", ownerId="evil-owner")
        assert response.status_code == 202
        body = response.json()
        assert set(body) == {"jobId", "alreadyEnqueued"}
        assert body["alreadyEnqueued"] is False
        job_id = UUID(body["jobId"])
        assert response.headers["location"] == f"/counter/jobs/{job_id}"
        me = (await alice.client.get("/auth/me")).json()
        # The row is there already, under the signed-in user's id, not the body's tenantId.
        status = await run.services.queue.get_status(job_id, QUEUE, me["id"])
        assert status is not None
        assert await run.services.queue.get_status(job_id, QUEUE, "evil-tenant") is None

        job = await alice.client.get(response.headers["location"])
        assert job.status_code == 200
        assert job.json()["state"] == "ready"
        assert job.json()["attempt"] == 0

        assert await drain(run.worker()) == 1
        done = (await alice.client.get(response.headers["location"])).json()
        assert done["state"] == "completed"
        assert done["attempt"] == 1
        assert (await alice.summary()) | {"from": None, "to": None} == {
            "from": None,
            "to": None,
            "count": 1,
            "total": 5,
        }
        await alice.client.aclose()


async def test_retries_return_the_original_job_and_other_quantities_conflict(
    settings: Settings,
) -> None:
    async with running(settings) as run:
        alice = await _signed_in(run, settings, "alice@example.com")
        bob = await _signed_in(run, settings, "bob@example.com")
        first = await alice.submit("same-key", 7)
        retry = await alice.submit("same-key", 7)
        assert first.status_code == retry.status_code == 202
        assert retry.json() == {"jobId": first.json()["jobId"], "alreadyEnqueued": True}
        assert retry.headers["location"] == first.headers["location"]

        conflict = await alice.submit("same-key", 8)
        assert conflict.status_code == 409
        # Another user's identical key is another user's job.
        theirs = await bob.submit("same-key", 7)
        assert theirs.status_code == 202
        assert theirs.json()["jobId"] != first.json()["jobId"]

        await drain(run.worker())
        after = await alice.submit("same-key", 7)  # even after it ran
        assert after.json() == {"jobId": first.json()["jobId"], "alreadyEnqueued": True}
        await drain(run.worker())
        assert (await alice.summary())["total"] == 7
        await alice.client.aclose()
        await bob.client.aclose()
    assert await count_rows(settings, "caravel_jobs") == 2


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("Idempotency-Key", "")],
        [("Idempotency-Key", "   ")],
        [("Idempotency-Key", "k" * 129)],
        [("Idempotency-Key", "tab\tinside")],
        [("Idempotency-Key", "a"), ("Idempotency-Key", "b")],
        [("Idempotency-Key", "a"), ("Idempotency-Key", "a")],
    ],
)
async def test_bad_idempotency_keys_are_400(
    settings: Settings, headers: list[tuple[str, str]]
) -> None:
    async with running(settings) as run:
        alice = await _signed_in(run, settings, "alice@example.com")
        assert alice.token is not None
        response = await alice.client.post(
            "/counter/events",
            json={"quantity": 1},
            headers=[("RequestVerificationToken", alice.token), *headers],
        )
        assert response.status_code == 400, response.text
        longest = await alice.submit("k" * 128, 1)
        assert longest.status_code == 202
        await alice.client.aclose()
    assert await count_rows(settings, "caravel_jobs") == 1


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"quantity": 0},
        {"quantity": 1001},
        {"quantity": -5},
        {"quantity": "5"},
        {"quantity": 5.0},
        {"quantity": 5.5},
        {"quantity": True},
        {"quantity": None},
        {"quantity": 10**30},
        [5],
        "5",
    ],
)
async def test_invalid_quantities_are_400(settings: Settings, body: object) -> None:
    async with running(settings) as run:
        alice = await _signed_in(run, settings, "alice@example.com")
        response = await alice.client.post(
            "/counter/events", json=body, headers=alice.headers(**{"Idempotency-Key": "k"})
        )
        assert response.status_code == 400, response.text
        no_type = await alice.client.post(
            "/counter/events",
            content=b'{"quantity": 5}',
            headers={**alice.headers(**{"Idempotency-Key": "k"}), "Content-Type": "text/plain"},
        )
        assert no_type.status_code == 400
        await alice.client.aclose()
    assert await count_rows(settings, "caravel_jobs") == 0


async def test_users_see_only_their_own_jobs_results_and_totals(settings: Settings) -> None:
    async with running(settings) as run:
        alice = await _signed_in(run, settings, "alice@example.com")
        bob = await _signed_in(run, settings, "bob@example.com")
        alice_jobs = [(await alice.submit(f"a-{q}", q)).json()["jobId"] for q in (1, 2, 3)]
        bob_job = (await bob.submit("b-1", 100)).json()["jobId"]
        await drain(run.worker())

        assert (await bob.client.get(f"/counter/jobs/{alice_jobs[0]}")).status_code == 404
        assert (await alice.client.get(f"/counter/jobs/{bob_job}")).status_code == 404
        missing = "00000000-0000-7000-8000-000000000000"
        assert (await alice.client.get(f"/counter/jobs/{missing}")).status_code == 404
        assert (await alice.client.get("/counter/jobs/not-a-uuid")).status_code == 400

        alice_results = (await alice.client.get("/counter/results")).json()["items"]
        bob_results = (await bob.client.get("/counter/results")).json()["items"]
        assert sorted(r["jobId"] for r in alice_results) == sorted(alice_jobs)
        assert [r["jobId"] for r in bob_results] == [bob_job]
        assert (await alice.summary())["count"] == 3
        assert (await alice.summary())["total"] == 6
        assert (await bob.summary())["total"] == 100
        await alice.client.aclose()
        await bob.client.aclose()


async def test_results_are_ordered_and_paged(settings: Settings) -> None:
    async with running(settings) as run:
        alice = await _signed_in(run, settings, "alice@example.com")
        for q in range(1, 8):
            assert (await alice.submit(f"k-{q}", q)).status_code == 202
        await drain(run.worker())
        page = (await alice.client.get("/counter/results")).json()
        assert page["offset"] == 0
        assert page["limit"] == 50
        items = page["items"]
        assert len(items) == 7
        assert items == sorted(items, key=lambda r: (r["recordedAt"], r["jobId"]))
        first = (await alice.client.get("/counter/results", params={"limit": 3})).json()["items"]
        rest = (
            await alice.client.get("/counter/results", params={"offset": 3, "limit": 100})
        ).json()["items"]
        assert first + rest == items
        beyond = await alice.client.get("/counter/results", params={"offset": 10_000})
        assert beyond.json()["items"] == []
        for params in (
            {"limit": 0},
            {"limit": 101},
            {"offset": -1},
            {"offset": 10_001},
            {"limit": "ten"},
        ):
            response = await alice.client.get("/counter/results", params=params)
            assert response.status_code == 400, params
        await alice.client.aclose()


async def test_time_windows(settings: Settings) -> None:
    async with running(settings) as run:
        alice = await _signed_in(run, settings, "alice@example.com")
        await alice.submit("k-1", 4)
        await drain(run.worker())
        now = datetime.now(UTC)
        recorded = (await alice.client.get("/counter/results")).json()["items"][0]["recordedAt"]
        at = datetime.fromisoformat(recorded)

        default = await alice.summary()
        start, end = datetime.fromisoformat(default["from"]), datetime.fromisoformat(default["to"])
        assert end - start == timedelta(hours=24)
        assert abs(end - now) < timedelta(minutes=1)

        # from is inclusive, to exclusive.
        assert (await alice.summary(**{"from": _iso(at)}))["count"] == 1
        assert (await alice.summary(to=_iso(at)))["count"] == 0
        ms = timedelta(milliseconds=1)
        assert (await alice.summary(to=_iso(at + ms)))["count"] == 1
        only_to = await alice.summary(to=_iso(at + ms))
        assert datetime.fromisoformat(only_to["to"]) - datetime.fromisoformat(
            only_to["from"]
        ) == timedelta(hours=24)
        plus = (at - ms).isoformat()  # "+00:00" spelled out
        assert (await alice.summary(**{"from": plus}))["count"] == 1
        month = {"from": _iso(at - timedelta(days=31) + ms), "to": _iso(at + ms)}
        assert (await alice.summary(**month))["count"] == 1
        assert (await alice.client.get("/counter/results", params=month)).status_code == 200

        bad = [
            {"from": "2026-09-28"},
            {"from": "2026-09-28T00:00:00"},
            {"from": "2026-09-28T00:00:00+01:00"},
            {"from": "2026-09-28T00:00:00-00:00"},
            {"from": "2026-13-01T00:00:00Z"},
            {"from": "yesterday"},
            {"to": "2026-09-28T00:00:00z"},
            {"from": "2026-09-28T00:00:00Z", "to": "2026-09-28T00:00:00Z"},
            {"from": "2026-09-29T00:00:00Z", "to": "2026-09-28T00:00:00Z"},
            {"from": "2026-08-01T00:00:00Z", "to": "2026-09-01T00:00:00.001Z"},
            {"to": "0001-01-01T00:00:00Z"},
            {"to": "9999-12-31T23:59:59.999999999Z"},
        ]
        for params in bad:
            for path in ("/counter/summary", "/counter/results"):
                response = await alice.client.get(path, params=params)
                assert response.status_code == 400, (path, params, response.text)
        for path in ("/counter/summary", "/counter/results"):
            early = await alice.client.get(path, params={"to": "0001-01-01T00:00:00Z"})
            assert early.json()["detail"].startswith("to must be from 1970-01-01T00:00:00Z")
        await alice.client.aclose()


async def _break_queue(settings: Settings, rename: tuple[str, str]) -> None:
    from caravel_samples.backend.db import create_engine

    engine = create_engine(settings)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text(f"ALTER TABLE {rename[0]} RENAME TO {rename[1]}"))
    finally:
        await engine.dispose()


async def test_a_failing_queue_is_a_server_error_never_a_false_202(settings: Settings) -> None:
    async with running(settings) as run:
        alice = await _signed_in(run, settings, "alice@example.com")
        await _break_queue(settings, ("caravel_jobs", "caravel_jobs_away"))
        try:
            failed = await alice.submit("k-1", 5)
            assert failed.status_code == 503
            assert failed.json() == {
                "detail": "the queue is unavailable; nothing was accepted, try again later"
            }
            assert "jobId" not in failed.text
        finally:
            await _break_queue(settings, ("caravel_jobs_away", "caravel_jobs"))
        assert await count_rows(settings, "caravel_jobs") == 0
        # The same key, retried once the queue is back, creates the job for the first time.
        retried = await alice.submit("k-1", 5)
        assert retried.status_code == 202
        assert retried.json()["alreadyEnqueued"] is False
        await alice.client.aclose()


class UnreachableQueue(DatabaseQueue):
    """A queue whose database went away: every enqueue fails the way a lost connection does."""

    async def enqueue(self, job: object, dispatch: DispatchOptions) -> EnqueueResult:
        raise StoreError("enqueue")


async def test_a_queue_database_that_cannot_be_reached_is_a_server_error(
    settings: Settings,
) -> None:
    async with running(settings) as run:
        alice = await _signed_in(run, settings, "alice@example.com")
        healthy = run.services.queue
        run.services.queue = UnreachableQueue(healthy.store, healthy.registry)
        response = await alice.submit("k-1", 5)
        assert response.status_code == 503
        assert response.headers["retry-after"] == "5"
        assert "jobId" not in response.text
        run.services.queue = healthy
        await alice.client.aclose()
    assert await count_rows(settings, "caravel_jobs") == 0


async def test_submissions_survive_a_transport_retry(settings: Settings) -> None:
    """A client that lost the 202 sends the same request again and learns the same job."""
    async with running(settings) as run:
        alice = await _signed_in(run, settings, "alice@example.com")
        responses: list[httpx.Response] = [await alice.submit("lost-response", 9) for _ in range(3)]
        ids = {r.json()["jobId"] for r in responses}
        assert len(ids) == 1
        assert [r.json()["alreadyEnqueued"] for r in responses] == [False, True, True]
        await alice.client.aclose()


async def test_idempotency_keys_are_utf8_and_counted_in_characters(settings: Settings) -> None:
    async with running(settings) as run:
        alice = await _signed_in(run, settings, "alice@example.com")
        assert alice.token is not None
        token = alice.token.encode()

        async def submit(key: bytes) -> httpx.Response:
            return await alice.client.post(
                "/counter/events",
                json={"quantity": 1},
                headers=[(b"RequestVerificationToken", token), (b"Idempotency-Key", key)],
            )

        euro = await submit("price-€".encode())
        assert euro.status_code == 202, euro.text
        again = await submit("price-€".encode())
        assert again.json() == {"jobId": euro.json()["jobId"], "alreadyEnqueued": True}
        longest = await submit(("€" * 128).encode())  # 384 bytes, 128 characters
        assert longest.status_code == 202, longest.text
        too_long = await submit(("€" * 129).encode())
        assert too_long.status_code == 400
        for invalid in (b"\xff\xfe", "price-€".encode("latin-1", errors="replace") + b"\x80"):
            refused = await submit(invalid)
            assert refused.status_code == 400
            assert refused.json() == {"detail": "Idempotency-Key must be valid UTF-8"}
        async with run.services.engine.connect() as conn:
            keys = (
                (await conn.execute(sa.text("SELECT idempotency_key FROM caravel_jobs")))
                .scalars()
                .all()
            )
        assert sorted(keys) == sorted(["price-€", "€" * 128])
        await alice.client.aclose()
