"""Fixtures for the dashboard tests: a seeded queue on every database, the three kinds of user,
and (for the browser tests) a real uvicorn server and Debian's Chromium."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.requests import Request

from caravel.testing import ManualClock
from caravel.web import Dashboard, Principal, dashboard
from tests.support.dashboard.browser import chromium_missing
from tests.support.dashboard.seed import END, Seeded, seed
from tests.support.databases import IN_CI

#: Who the test ``authorize`` says a request comes from, by the ``caravel_test_user`` cookie
#: (browser tests) or the ``X-Test-User`` header (HTTP tests). A stand-in for the host
#: application's sign-in.
USERS: dict[str, Principal | None] = {
    "anonymous": None,
    "reader": Principal.reader("rita@example.com"),
    "operator": Principal.operator("otto@example.com"),
    "outsider": Principal("eve@example.com", can_read=False),
}
USER_COOKIE = "caravel_test_user"
USER_HEADER = "x-test-user"


def authorize(request: Request) -> Principal | None:
    name = request.headers.get(USER_HEADER) or request.cookies.get(USER_COOKIE) or "anonymous"
    return USERS.get(name)


def make_dashboard(url: str, *, refresh_seconds: int = 5, **extra: object) -> Dashboard:
    return dashboard(
        url,
        authorize=authorize,
        clock=ManualClock(END),
        refresh_seconds=refresh_seconds,
        **extra,  # type: ignore[arg-type]
    )


@pytest.fixture
async def seeded(db_url: str) -> Seeded:
    return await seed(db_url, small=True)


@pytest.fixture
def seeded_sync(db_url: str) -> Seeded:
    """The same, for synchronous (browser) tests."""
    return asyncio.run(seed(db_url, small=True))


@pytest.fixture
async def app(db_url: str, seeded: Seeded) -> AsyncIterator[Dashboard]:
    built = make_dashboard(db_url)
    try:
        yield built
    finally:
        await built.close()


def client_for(app: Dashboard, user: str = "operator", **options: object) -> httpx.AsyncClient:
    headers = {USER_HEADER: user} if user != "anonymous" else {}
    transport = httpx.ASGITransport(app=app, **options)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://localhost", headers=headers)


@pytest.fixture
async def operator(app: Dashboard) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(app, "operator") as client:
        yield client


CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')


async def csrf_token(client: httpx.AsyncClient, path: str) -> str:
    """Load a page with a form as this client (which sets the anti-forgery cookie) and return
    the form's token."""
    response = await client.get(path)
    assert response.status_code == 200, response.text
    found = CSRF_INPUT.search(response.text)
    assert found is not None, "the page has no anti-forgery token"
    return found.group(1)


@pytest.fixture
def need_chromium() -> None:
    """Browser tests need Debian's Chromium: they fail without it under CI=true and are skipped
    with the reason elsewhere."""
    missing = chromium_missing()
    if missing is not None:
        if IN_CI:
            pytest.fail(f"{missing}; the browser tests cannot run", pytrace=False)
        pytest.skip(missing)
