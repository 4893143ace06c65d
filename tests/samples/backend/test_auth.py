"""Accounts, sessions and antiforgery tokens, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from caravel_samples.backend.guards import CSRF_HEADER, SESSION_COOKIE
from caravel_samples.backend.settings import Settings

from tests.samples.backend.support import PASSWORD, add_user, count_rows, running, with_overrides

PROTECTED = [
    ("GET", "/auth/csrf"),
    ("GET", "/auth/me"),
    ("POST", "/auth/logout"),
    ("POST", "/auth/sessions/revoke"),
    ("GET", "/notes"),
    ("POST", "/notes"),
    ("DELETE", "/notes/00000000-0000-0000-0000-000000000000"),
    ("POST", "/counter/events"),
    ("GET", "/counter/jobs/00000000-0000-0000-0000-000000000000"),
    ("GET", "/counter/results"),
    ("GET", "/counter/summary"),
    ("GET", "/api/jobs"),
]


async def test_a_fresh_database_has_no_accounts(settings: Settings) -> None:
    assert await count_rows(settings, "users") == 0
    async with running(settings) as run:
        response = await run.client.post(
            "/auth/login", json={"email": "admin@example.com", "password": "admin"}
        )
        assert response.status_code == 401


@pytest.mark.parametrize(("method", "path"), PROTECTED)
async def test_anonymous_requests_get_401(settings: Settings, method: str, path: str) -> None:
    async with running(settings) as run:
        response = await run.client.request(
            method, path, json={"quantity": 1, "text": "x"}, headers={"Idempotency-Key": "k"}
        )
        assert response.status_code == 401
        assert response.json() == {"detail": "sign in first"}
        forged = await run.client.request(
            method, path, headers={"Cookie": f"{SESSION_COOKIE}=not-a-session"}
        )
        assert forged.status_code == 401


async def test_sign_in_sets_a_protected_session_cookie(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    async with running(settings) as run:
        response = await run.client.post(
            "/auth/login", json={"email": " Alice@Example.COM ", "password": PASSWORD}
        )
        assert response.status_code == 204
        cookie = response.headers["set-cookie"]
        assert cookie.startswith(f"{SESSION_COOKIE}=")
        for flag in ("HttpOnly", "SameSite=strict", "Secure", "Path=/", "Max-Age=28800"):
            assert flag in cookie
        me = await run.client.get("/auth/me")
        assert me.status_code == 200
        assert me.json()["email"] == "alice@example.com"
        assert me.json()["operator"] is False
        # The database keeps a hash of the token, never the token itself.
        token = run.client.cookies[SESSION_COOKIE]
        async with run.services.engine.connect() as conn:
            from sqlalchemy import text

            ids = (await conn.execute(text("SELECT id FROM sessions"))).scalars().all()
        assert token not in ids
        assert len(ids) == 1


async def test_wrong_credentials_get_one_generic_401(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    async with running(settings) as run:
        wrong_password = await run.client.post(
            "/auth/login", json={"email": "alice@example.com", "password": "wrong password"}
        )
        unknown_email = await run.client.post(
            "/auth/login", json={"email": "nobody@example.com", "password": PASSWORD}
        )
        for response in (wrong_password, unknown_email):
            assert response.status_code == 401
            assert "set-cookie" not in response.headers
        assert (
            wrong_password.json() == unknown_email.json() == {"detail": "invalid email or password"}
        )


@pytest.mark.parametrize(
    "body",
    [{}, {"email": "a@example.com"}, {"password": "x"}, {"email": 5, "password": "x"}, []],
)
async def test_malformed_sign_in_is_400(settings: Settings, body: object) -> None:
    async with running(settings) as run:
        response = await run.client.post("/auth/login", json=body)
        assert response.status_code == 400
        broken = await run.client.post(
            "/auth/login", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert broken.status_code == 400


async def test_the_session_id_changes_at_every_sign_in(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    async with running(settings) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        first = alice.client.cookies[SESSION_COOKIE]
        await alice.sign_in("alice@example.com")
        second = alice.client.cookies[SESSION_COOKIE]
        assert first != second
        # The session the second sign-in replaced is gone.
        stale = await run.client.get("/auth/me", headers={"Cookie": f"{SESSION_COOKIE}={first}"})
        assert stale.status_code == 401
        assert (await alice.client.get("/auth/me")).status_code == 200
        assert await count_rows(settings, "sessions") == 1


async def test_logout_ends_only_this_session(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    async with running(settings) as run, run.browser() as laptop, run.browser() as phone:
        await laptop.sign_in("alice@example.com")
        await phone.sign_in("alice@example.com")
        token = laptop.client.cookies[SESSION_COOKIE]
        response = await laptop.client.post("/auth/logout", headers=laptop.headers())
        assert response.status_code == 204
        assert f'{SESSION_COOKIE}=""' in response.headers["set-cookie"]
        assert (
            await run.client.get("/auth/me", headers={"Cookie": f"{SESSION_COOKIE}={token}"})
        ).status_code == 401
        assert (await phone.client.get("/auth/me")).status_code == 200


async def test_revoking_sessions_signs_out_every_device_at_once(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    await add_user(settings, "bob@example.com")
    async with (
        running(settings) as run,
        run.browser() as laptop,
        run.browser() as phone,
        run.browser() as bob,
    ):
        await laptop.sign_in("alice@example.com")
        await phone.sign_in("alice@example.com")
        await bob.sign_in("bob@example.com")
        response = await phone.client.post("/auth/sessions/revoke", headers=phone.headers())
        assert response.status_code == 204
        assert (await laptop.client.get("/auth/me")).status_code == 401
        assert (await phone.client.get("/auth/me")).status_code == 401
        assert (await bob.client.get("/auth/me")).status_code == 200
        await laptop.sign_in("alice@example.com")
        assert (await laptop.client.get("/auth/me")).status_code == 200


async def test_antiforgery_tokens_are_fresh_and_bound_to_their_session(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    async with running(settings) as run, run.browser() as laptop, run.browser() as phone:
        await laptop.sign_in("alice@example.com")
        await phone.sign_in("alice@example.com")
        first, second = await laptop.csrf(), await laptop.csrf()
        assert first != second
        assert (await laptop.client.get("/auth/csrf")).headers["cache-control"] == "no-store"
        for token in (first, second):
            ok = await laptop.client.post(
                "/notes", json={"text": "hi"}, headers={CSRF_HEADER: token}
            )
            assert ok.status_code == 201
        # The phone's session is another session: the laptop's token is worthless there.
        refused = await phone.client.post(
            "/notes", json={"text": "hi"}, headers={CSRF_HEADER: first}
        )
        assert refused.status_code == 403
        # A new sign-in is a new session: old tokens stop working.
        await laptop.sign_in("alice@example.com")
        stale = await laptop.client.post(
            "/notes", json={"text": "hi"}, headers={CSRF_HEADER: first}
        )
        assert stale.status_code == 403


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {CSRF_HEADER: ""},
        {CSRF_HEADER: "garbage"},
        {CSRF_HEADER: "a.b"},
        {CSRF_HEADER: "x" * 5000},
    ],
)
async def test_state_changes_without_a_valid_token_are_refused_before_any_work(
    settings: Settings, headers: dict[str, str]
) -> None:
    await add_user(settings, "alice@example.com")
    async with running(settings) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        attempts = [
            await alice.client.post("/notes", json={"text": "hello"}, headers=headers),
            # Invalid bodies too: the token is checked before the body is even parsed.
            await alice.client.post("/notes", content=b"{broken", headers=headers),
            await alice.client.post(
                "/counter/events",
                json={"quantity": 5},
                headers={**headers, "Idempotency-Key": "k-1"},
            ),
            await alice.client.post("/auth/logout", headers=headers),
            await alice.client.post("/auth/sessions/revoke", headers=headers),
        ]
        for response in attempts:
            assert response.status_code == 403, response.text
        assert (await alice.client.get("/auth/me")).status_code == 200
    assert await count_rows(settings, "notes") == 0
    assert await count_rows(settings, "caravel_jobs") == 0


async def test_two_tokens_in_two_headers_are_refused(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    async with running(settings) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        token = await alice.csrf()
        response = await alice.client.post(
            "/notes",
            json={"text": "hello"},
            headers=[(CSRF_HEADER, token), (CSRF_HEADER, token)],
        )
        assert response.status_code == 403


async def test_registration_is_off_by_default(settings: Settings) -> None:
    async with running(settings) as run:
        response = await run.client.post(
            "/auth/register", json={"email": "new@example.com", "password": PASSWORD}
        )
        assert response.status_code == 404
        assert "/auth/register" not in (await run.client.get("/openapi.json")).json()["paths"]
    assert await count_rows(settings, "users") == 0


async def test_registration_when_enabled_reveals_nothing_about_accounts(
    settings: Settings,
) -> None:
    await add_user(settings, "taken@example.com")
    async with running(with_overrides(settings, allow_registration=True)) as run:
        new = await run.client.post(
            "/auth/register", json={"email": "new@example.com", "password": PASSWORD}
        )
        taken = await run.client.post(
            "/auth/register", json={"email": "taken@example.com", "password": "another password!"}
        )
        assert new.status_code == taken.status_code == 204
        assert new.content == taken.content == b""
        short = await run.client.post(
            "/auth/register", json={"email": "short@example.com", "password": "too short"}
        )
        assert short.status_code == 400
        bad_email = await run.client.post(
            "/auth/register", json={"email": "not an email", "password": PASSWORD}
        )
        assert bad_email.status_code == 400
        async with run.browser() as newcomer:
            await newcomer.sign_in("new@example.com")
        # The existing account keeps its own password.
        stolen = await run.client.post(
            "/auth/login", json={"email": "taken@example.com", "password": "another password!"}
        )
        assert stolen.status_code == 401
    assert await count_rows(settings, "users") == 2


CONTROL = ["nul\u0000@example.com", "bell\u0007@example.com", "esc\u001b@example.com", "\u0085"]


@pytest.mark.parametrize("text", CONTROL)
async def test_control_characters_in_any_text_field_are_400_naming_it(
    settings: Settings, text: str
) -> None:
    """The same 400 on SQLite and PostgreSQL, before any query (PostgreSQL cannot even hold a
    NUL, so a query would fail there)."""
    await add_user(settings, "alice@example.com")
    registering = with_overrides(settings, allow_registration=True)
    async with running(registering) as run, run.browser() as alice:
        cases = [
            ("/auth/login", {"email": text, "password": PASSWORD}, "email"),
            ("/auth/login", {"email": "alice@example.com", "password": f"pw {text}"}, "password"),
            ("/auth/register", {"email": text, "password": PASSWORD}, "email"),
            ("/auth/register", {"email": "b@example.com", "password": PASSWORD + text}, "password"),
        ]
        for path, body, field in cases:
            response = await run.client.post(path, json=body)
            assert response.status_code == 400, (path, field, response.text)
            assert f"{field}: " in response.json()["detail"], response.text
            assert text not in response.text
        await alice.sign_in("alice@example.com")
        note = await alice.client.post("/notes", json={"text": text}, headers=alice.headers())
        assert note.status_code == 400, note.text
        assert "text: " in note.json()["detail"]
    assert await count_rows(settings, "users") == 1
    assert await count_rows(settings, "notes") == 0
