"""What every answer carries (nosniff, no-store on JSON), the session cookie's name, the API
docs pages being off unless asked for, and redirects that never echo the Host header."""

from __future__ import annotations

from caravel_samples.backend.guards import SESSION_COOKIE
from caravel_samples.backend.settings import Settings

from tests.samples.backend.support import PASSWORD, add_user, running, with_overrides


async def test_authenticated_json_is_nosniff_and_no_store(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    async with running(settings) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        answers = [
            await alice.client.get("/auth/me"),
            await alice.client.get("/notes"),
            await alice.client.get("/counter/summary"),
            await alice.client.get("/counter/jobs/00000000-0000-0000-0000-000000000000"),
            await alice.client.get("/notes", params={"limit": "0"}),
            await run.client.get("/auth/me"),  # 401
        ]
        assert [a.status_code for a in answers] == [200, 200, 200, 404, 400, 401]
        for answer in answers:
            assert answer.headers["x-content-type-options"] == "nosniff", answer.url
            assert answer.headers["cache-control"] == "no-store", answer.url
        # A header a route set itself is kept, once.
        csrf = await alice.client.get("/auth/csrf")
        assert csrf.headers.get_list("cache-control") == ["no-store"]
        assert csrf.headers.get_list("x-content-type-options") == ["nosniff"]


async def test_the_session_cookie_is_host_prefixed_when_secure(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    body = {"email": "alice@example.com", "password": PASSWORD}
    async with running(settings) as run:
        secure = await run.client.post("/auth/login", json=body)
        assert secure.status_code == 204
        cookie = secure.headers["set-cookie"]
        assert SESSION_COOKIE == "__Host-caravel_session"
        assert cookie.startswith("__Host-caravel_session=")
        assert "Secure" in cookie
        assert "Path=/" in cookie
        assert "Domain" not in cookie
        assert (await run.client.get("/auth/me")).status_code == 200
        # The old, unprefixed name is not a session.
        token = run.client.cookies[SESSION_COOKIE]
        old = await run.browser().client.get(
            "/auth/me", headers={"Cookie": f"caravel_session={token}"}
        )
        assert old.status_code == 401
    async with running(with_overrides(settings, secure_cookies=False)) as run:
        plain = await run.client.post("/auth/login", json=body)
        assert plain.headers["set-cookie"].startswith("caravel_session=")
        assert "Secure" not in plain.headers["set-cookie"]
        assert (await run.client.get("/auth/me")).status_code == 200


async def test_the_docs_pages_are_off_unless_asked_for(settings: Settings) -> None:
    async with running(settings) as run:
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            assert (await run.client.get(path)).status_code == 404, path
        assert (await run.client.get("/openapi.json")).status_code == 200
    async with running(with_overrides(settings, api_docs=True)) as run:
        for path in ("/docs", "/redoc"):
            page = await run.client.get(path)
            assert page.status_code == 200, path
            assert page.headers["x-content-type-options"] == "nosniff"


async def test_redirects_do_not_echo_the_host(settings: Settings) -> None:
    async with running(settings) as run:
        for path, target in (("/notes/?offset=1", "/notes?offset=1"), ("/ops", "/ops/")):
            moved = await run.client.get(path, headers={"Host": "evil.example"})
            assert moved.status_code in (307, 308), path
            assert moved.headers["location"] == target, path
