"""Body size, concurrency and sign-in limits, on SQLite and PostgreSQL. The real-server checks
of the body limit are in ``test_server.py``."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator

import httpx
import pytest
from caravel_samples.backend import security
from caravel_samples.backend.body_deadline import (
    GRACE_SECONDS,
    BodyDeadlineMiddleware,
    ReadBudget,
)
from caravel_samples.backend.login_limit import FixedWindow
from caravel_samples.backend.settings import Settings

from tests.samples.backend.support import PASSWORD, add_user, count_rows, running, with_overrides

LIMIT = 16 * 1024


class CountingBody:
    """A streamed request body that records how much of it the server pulled."""

    def __init__(self, chunks: int, size: int = 1024, gate: asyncio.Event | None = None) -> None:
        self.chunks, self.size, self.gate = chunks, size, gate
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.chunks):
            if self.gate is not None:
                await self.gate.wait()
            self.pulled += 1
            yield b" " * self.size


def padded_event(total_bytes: int) -> bytes:
    """A valid event body padded with an ignored field to exactly ``total_bytes``."""
    empty = json.dumps({"quantity": 5, "pad": ""}, separators=(",", ":")).encode()
    body = json.dumps(
        {"quantity": 5, "pad": "x" * (total_bytes - len(empty))}, separators=(",", ":")
    ).encode()
    assert len(body) == total_bytes
    return body


async def test_a_declared_oversized_body_is_refused_before_it_is_read(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    async with running(settings) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        body = CountingBody(chunks=20)
        response = await alice.client.post(
            "/counter/events",
            content=body,
            headers=alice.headers(
                **{"Idempotency-Key": "k", "Content-Length": str(20 * 1024)},
            ),
        )
        assert response.status_code == 413
        assert response.headers["connection"] == "close"
        assert body.pulled == 0
        # Before authentication, too: an anonymous oversized request is also a 413.
        anonymous = await run.client.post("/auth/login", content=b"{" + b" " * LIMIT + b"}")
        assert anonymous.status_code == 413
    assert await count_rows(settings, "caravel_jobs") == 0


async def test_a_chunked_body_is_cut_off_at_the_limit(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    async with running(settings) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        body = CountingBody(chunks=64)
        response = await alice.client.post(
            "/counter/events",
            content=body,
            headers=alice.headers(**{"Idempotency-Key": "k", "Content-Type": "application/json"}),
        )
        assert response.status_code == 413
        assert body.pulled == LIMIT // 1024 + 1  # stopped at the first chunk past the limit
    assert await count_rows(settings, "caravel_jobs") == 0


async def test_a_body_of_exactly_the_limit_is_accepted(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    async with running(settings) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        headers = alice.headers(**{"Content-Type": "application/json"})
        fits = await alice.client.post(
            "/counter/events",
            content=padded_event(LIMIT),
            headers={**headers, "Idempotency-Key": "fits"},
        )
        assert fits.status_code == 202
        too_big = await alice.client.post(
            "/counter/events",
            content=padded_event(LIMIT + 1),
            headers={**headers, "Idempotency-Key": "too-big"},
        )
        assert too_big.status_code == 413
    assert await count_rows(settings, "caravel_jobs") == 1


async def test_the_concurrency_limit_refuses_at_once_and_spares_the_probes(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two sign-ins held inside the application, in their password check (a real thread), fill
    # the limit. (A slow body no longer can: it is read before a slot is taken.)
    inside, release = threading.Semaphore(0), threading.Event()
    check = security.verify_password

    def held_check(stored: str | None, password: str) -> bool:
        inside.release()
        release.wait(30)
        return check(stored, password)

    monkeypatch.setattr(security, "verify_password", held_check)
    async with running(with_overrides(settings, limits={"concurrency": 2})) as run:
        body = {"email": "nobody@example.com", "password": "wrong password"}
        held = [asyncio.create_task(run.client.post("/auth/login", json=body)) for _ in range(2)]
        for _ in range(2):
            assert await asyncio.to_thread(inside.acquire, True, 30)
        refused = await run.client.get("/auth/me")
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert refused.json() == {"detail": "too many requests; try again later"}
        assert (await run.client.get("/health/live")).status_code == 200
        assert (await run.client.get("/health/ready")).status_code == 200
        release.set()
        assert [r.status_code for r in await asyncio.gather(*held)] == [401, 401]
        assert (await run.client.get("/auth/me")).status_code == 401  # admitted again


async def test_a_slow_body_is_408_before_it_takes_a_slot(settings: Settings) -> None:
    """The deadline's rules on an injected clock: a body whose next part is overdue is refused
    without waiting, the connection is closed, and the slot was never taken."""
    ticks = iter([0.0, 0.0, 0.5, 100.0])
    app = BodyDeadlineMiddleware(
        _never_called, timeout=10, min_rate=1024, clock=lambda: next(ticks)
    )
    sent: list[dict[str, object]] = []
    parts = [
        {"type": "http.request", "body": b"{", "more_body": True},
        {"type": "http.request", "body": b'"a"', "more_body": True},
    ]

    async def receive() -> dict[str, object]:
        return parts.pop(0)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    await app({"type": "http", "path": "/auth/login"}, receive, send)  # type: ignore[arg-type]
    assert sent[0]["status"] == 408
    assert (b"connection", b"close") in sent[0]["headers"]  # type: ignore[operator]
    assert json.loads(sent[1]["body"]) == {"detail": "the request body arrived too slowly"}  # type: ignore[arg-type]


async def _never_called(scope: object, receive: object, send: object) -> None:
    raise AssertionError("a too-slow request reached the application")


def test_the_read_budget_wants_the_whole_body_in_time_and_a_minimum_rate() -> None:
    assert ReadBudget(started=0.0, timeout=60, min_rate=1000).seconds_left(0.0, 0) == GRACE_SECONDS
    budget = ReadBudget(started=100.0, timeout=10, min_rate=1000, grace=1.0)
    assert budget.seconds_left(100.0, 0) == 1.0  # the first bytes may lag
    assert budget.seconds_left(101.0, 0) == 0  # ... not longer
    assert budget.seconds_left(103.0, 5000) == 3.0  # 5000 bytes buy 5 s after the grace
    assert budget.seconds_left(107.0, 5000) < 0  # too slow on average
    assert budget.seconds_left(105.0, 16 * 1024) == 5.0  # fast enough: the deadline rules
    assert budget.seconds_left(110.0, 16 * 1024) == 0


async def test_the_sign_in_window_is_generic_and_spares_everything_else(
    settings: Settings,
) -> None:
    await add_user(settings, "alice@example.com")
    limited = with_overrides(settings, limits={"login_permit_limit": 3, "login_window_seconds": 60})
    async with running(limited) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")  # 1
        for email in ("nobody@example.com", "alice@example.com"):  # 2, 3
            response = await run.client.post(
                "/auth/login", json={"email": email, "password": "wrong password"}
            )
            assert response.status_code == 401
        refusals: list[httpx.Response] = [
            await run.client.post(
                "/auth/login", json={"email": "alice@example.com", "password": PASSWORD}
            ),
            await run.client.post(
                "/auth/login", json={"email": "nobody@example.com", "password": PASSWORD}
            ),
            await run.client.post("/auth/login", content=b"not even json"),
        ]
        for response in refusals:
            assert response.status_code == 429
            assert 1 <= int(response.headers["retry-after"]) <= 60
            assert response.json() == {"detail": "too many requests; try again later"}
            assert "set-cookie" not in response.headers
        # Signed-in work and the probes go on.
        assert (await alice.client.get("/auth/me")).status_code == 200
        note = await alice.client.post("/notes", json={"text": "hi"}, headers=alice.headers())
        assert note.status_code == 201
        assert (await run.client.get("/health/ready")).status_code == 200


def test_the_fixed_window_resets_after_its_length() -> None:
    now = [100.0]
    window = FixedWindow(2, 60, clock=lambda: now[0])
    assert window.acquire() is None
    assert window.acquire() is None
    assert window.acquire() == 60
    now[0] += 59.5
    assert window.acquire() == 1
    now[0] += 0.5
    assert window.acquire() is None
    now[0] += 300  # several windows later
    assert window.acquire() is None
    assert window.acquire() is None
    assert window.acquire() == 60
