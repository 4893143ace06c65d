"""Who may do what: every route and action of the dashboard, walked for an anonymous user, a
user without access, a read-only user and an operator, plus the anti-forgery rules for every
POST and the loopback-only default. Real databases, real requests through the ASGI app."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from urllib.parse import urlencode

import httpx
import pytest

from caravel.errors import CaravelError, PrincipalTypeError
from caravel.web import ROUTES, Dashboard, dashboard
from caravel.web.app import RouteSpec
from caravel.web.csrf import COOKIE
from tests.support.dashboard.fixtures import USERS, client_for, csrf_token
from tests.support.dashboard.links import add_links
from tests.support.dashboard.seed import Seeded
from tests.support.dashboard.workflows import make_workflow


@dataclass(frozen=True)
class Target:
    path: str
    form: dict[str, str] | None = None


def _targets(
    seeded: Seeded, run_id: str, batch_id: str = "none", workflow_id: str = "none"
) -> dict[str, Target]:
    dead = next(ref for ref in seeded.dead if ref.queue == "emails")
    owner = urlencode({"queue": dead.queue, "tenant": dead.tenant_id})
    waiting = seeded.retrying  # a ready job, waiting for its retry: cancelled by an operator
    assert waiting is not None
    waiting_owner = urlencode({"queue": waiting.queue, "tenant": waiting.tenant_id})
    done = seeded.completed[0]  # deleted by an operator
    done_owner = urlencode({"queue": done.queue, "tenant": done.tenant_id})
    return {
        "overview": Target("/"),
        "jobs": Target("/jobs?queue=emails"),
        # Jobs no other target touches: the waiting invoices, and the completed reports.
        "cancel_matching_confirm": Target("/jobs/cancel?queue=billing.invoices"),
        "cancel_matching": Target("/jobs/cancel", {"queue": "billing.invoices"}),
        "delete_matching_confirm": Target("/jobs/delete?queue=reports&state=completed"),
        "delete_matching": Target("/jobs/delete", {"queue": "reports", "state": "completed"}),
        "job": Target(f"/jobs/{dead.job_id}?{owner}"),
        "replay_one_confirm": Target(f"/jobs/{dead.job_id}/replay?{owner}"),
        "replay_one": Target(
            f"/jobs/{dead.job_id}/replay", {"queue": dead.queue, "tenant": dead.tenant_id}
        ),
        "cancel_one_confirm": Target(f"/jobs/{waiting.job_id}/cancel?{waiting_owner}"),
        "cancel_one": Target(
            f"/jobs/{waiting.job_id}/cancel", {"queue": waiting.queue, "tenant": waiting.tenant_id}
        ),
        "delete_one_confirm": Target(f"/jobs/{done.job_id}/delete?{done_owner}"),
        "delete_one": Target(
            f"/jobs/{done.job_id}/delete", {"queue": done.queue, "tenant": done.tenant_id}
        ),
        "dead_letters": Target("/dead-letters"),
        "replay_selection_confirm": Target("/dead-letters/replay?queue=webhooks"),
        "replay_selection": Target("/dead-letters/replay", {"queue": "webhooks"}),
        "replay_progress": Target(f"/replays/{run_id}"),
        # Dead letters that finished over a second before the dashboard's now: all of them.
        "prune_confirm": Target("/prune?dead_letter=1s"),
        "prune": Target("/prune", {"dead_letter": "1s"}),
        "pause_confirm": Target("/queues/emails/pause"),
        "pause": Target("/queues/emails/pause", {"queue": "emails"}),
        "resume_confirm": Target("/queues/emails/resume"),
        "resume": Target("/queues/emails/resume", {"queue": "emails"}),
        "queue_limits": Target("/queues/emails/limits"),
        "queue_limits_set": Target(
            "/queues/emails/limits", {"queue": "emails", "concurrency": "4"}
        ),
        "queue_rate_set": Target("/queues/emails/limits/rate", {"queue": "emails", "rate": "50"}),
        "queue_limits_clear": Target("/queues/emails/limits/clear", {"queue": "emails"}),
        "workers": Target("/workers"),
        "schedules": Target("/schedules"),
        "schedule_pause_confirm": Target("/schedules/nightly-digest/pause"),
        "schedule_pause": Target("/schedules/nightly-digest/pause", {"schedule": "nightly-digest"}),
        "schedule_resume_confirm": Target("/schedules/nightly-digest/resume"),
        "schedule_resume": Target(
            "/schedules/nightly-digest/resume", {"schedule": "nightly-digest"}
        ),
        "batches": Target("/batches"),
        "batch": Target(f"/batches/{batch_id}"),
        "workflows": Target("/workflows"),
        "workflow": Target(f"/workflows/{workflow_id}"),
        "workflow_cancel_confirm": Target(f"/workflows/{workflow_id}/cancel"),
        "workflow_cancel": Target(f"/workflows/{workflow_id}/cancel", {}),
        "metrics": Target("/metrics"),
        "static": Target("/static/dashboard.css"),
    }


def _expected(spec: RouteSpec, user: str) -> int:
    principal = USERS[user]
    if spec.needs == "public":
        return 200
    if principal is None:
        return 401
    allowed = principal.can_read and (spec.needs == "read" or principal.can_operate)
    if not allowed:
        return 403
    return 303 if spec.method == "POST" else 200


async def _dead_letters(app: Dashboard) -> int:
    return sum(c.dead_letter for c in await app.reader.queue_counts())


async def _paused(app: Dashboard) -> list[str]:
    return [p.queue for p in await app.reader.paused_queues()]


async def _schedules(app: Dashboard) -> list[tuple[str, bool]]:
    return [(s.name, s.paused_at is not None) for s in await app.reader.list_schedules()]


async def _snapshot(app: Dashboard) -> list[tuple[str, int, int, int, int]]:
    """Per queue: dead letters, completed, cancelled, and every other job (whatever the clock
    makes of them): what any action of the dashboard would change."""
    return [
        (
            c.queue,
            c.dead_letter,
            c.completed,
            c.cancelled,
            c.ready + c.delayed + c.running + c.expired,
        )
        for c in await app.reader.queue_counts()
    ]


async def _start_run(app: Dashboard, queue: str) -> str:
    async with client_for(app, "operator") as client:
        token = await csrf_token(client, f"/dead-letters/replay?queue={queue}")
        response = await client.post(
            "/dead-letters/replay", data={"csrf_token": token, "queue": queue}
        )
    assert response.status_code == 303
    await app.replays.wait()
    return response.headers["location"].rsplit("/", 1)[1]


def test_every_route_is_in_the_table(app: Dashboard) -> None:
    served = {(method, route.path) for route in app.router.routes for method in route.methods}  # type: ignore[attr-defined]
    listed = {(spec.method, spec.path) for spec in ROUTES}
    assert served - {("HEAD", path) for _, path in listed} == listed


@pytest.mark.parametrize("user", list(USERS))
async def test_route_matrix(app: Dashboard, seeded: Seeded, db_url: str, user: str) -> None:
    run_id = await _start_run(app, "reports")
    links = await add_links(db_url)
    flow = await make_workflow(db_url)
    targets = _targets(seeded, run_id, str(links.batch.batch_id), str(flow.workflow_id))
    assert set(targets) == {spec.name for spec in ROUTES}, "a route is missing from the matrix"
    async with client_for(app, user) as client, client_for(app, "operator") as op:
        for spec in ROUTES:
            target = targets[spec.name]
            before = await _snapshot(app)
            paused_before = await _paused(app)
            schedules_before = await _schedules(app)
            if spec.method == "GET":
                response = await client.get(target.path)
            else:
                assert target.form is not None
                # The best a refused user could send: a valid token, but the operator's.
                # (A confirmation page that always has its form: the replay pages' may not.)
                token = await csrf_token(op, "/queues/emails/pause")
                client.cookies.set(COOKIE, op.cookies[COOKIE])
                response = await client.post(target.path, data={"csrf_token": token, **target.form})
                client.cookies.clear()
                await app.replays.wait()
            expected = _expected(spec, user)
            assert response.status_code == expected, (spec, user, response.text[:400])
            if expected in (401, 403):
                assert await _snapshot(app) == before, f"{spec} changed state for {user}"
                assert await _paused(app) == paused_before, f"{spec} paused for {user}"
                assert await _schedules(app) == schedules_before, f"{spec} for {user}"
                assert "otto@example.com" not in response.text
            if expected == 401:
                assert "Sign in first" in response.text
            if expected == 403:
                assert "Not allowed" in response.text


def _post_cases(
    operator_token: str, other_token: str
) -> list[tuple[str, Callable[[httpx.AsyncClient], dict[str, object]]]]:
    return [
        ("no token", lambda c: {"data": {}}),
        ("empty token", lambda c: {"data": {"csrf_token": ""}}),
        ("forged token", lambda c: {"data": {"csrf_token": "A" * 43}}),
        ("another principal's token", lambda c: {"data": {"csrf_token": other_token}}),
        ("token without its cookie", lambda c: {"data": {"csrf_token": operator_token}}),
    ]


@pytest.mark.parametrize(
    "action",
    [
        "replay_one",
        "replay_selection",
        "cancel_one",
        "delete_one",
        "cancel_matching",
        "delete_matching",
        "prune",
    ],
)
async def test_every_post_needs_the_token_of_its_own_cookie_and_principal(
    app: Dashboard, seeded: Seeded, action: str
) -> None:
    target = _targets(seeded, "none")[action]
    assert target.form is not None
    async with client_for(app, "operator") as op:
        token = await csrf_token(op, "/dead-letters/replay?queue=webhooks")
        cookie = op.cookies[COOKIE]
        # A token made for another principal with the same cookie value.
        forged = app._signer.token(cookie, "rita@example.com")
        before = await _snapshot(app)
        for name, case in _post_cases(token, forged):
            kwargs = case(op)
            data = {**target.form, **kwargs["data"]}  # type: ignore[dict-item]
            if name == "token without its cookie":
                op.cookies.clear()
            response = await op.post(target.path, data=data)
            if name == "token without its cookie":
                op.cookies.set(COOKIE, cookie)
            assert response.status_code == 403, name
            assert "The form has expired" in response.text, name
            assert await _snapshot(app) == before, name
        # A form that is not an HTML form, or too large, is refused before the token is read.
        response = await op.post(target.path, json={"csrf_token": token, **target.form})
        assert response.status_code == 415
        response = await op.post(
            target.path, data={"csrf_token": token, **target.form, "pad": "x" * 9000}
        )
        assert response.status_code == 413
        assert await _snapshot(app) == before
        # And with the right token the same request works.
        response = await op.post(target.path, data={"csrf_token": token, **target.form})
        assert response.status_code == 303
        await app.replays.wait()
        assert await _snapshot(app) != before


@pytest.mark.parametrize("action", ["pause", "resume"])
async def test_a_pause_or_resume_needs_the_token_of_its_own_cookie_and_principal(
    app: Dashboard, action: str
) -> None:
    path = f"/queues/emails/{action}"
    if action == "resume":
        await app.writer.pause_queue("emails")
    async with client_for(app, "operator") as op:
        token = await csrf_token(op, path)
        cookie = op.cookies[COOKIE]
        forged = app._signer.token(cookie, "rita@example.com")
        before = await _paused(app)
        for name, case in _post_cases(token, forged):
            data = {"queue": "emails", **case(op)["data"]}  # type: ignore[dict-item]
            if name == "token without its cookie":
                op.cookies.clear()
            response = await op.post(path, data=data)
            if name == "token without its cookie":
                op.cookies.set(COOKIE, cookie)
            assert response.status_code == 403, name
            assert "The form has expired" in response.text, name
            assert await _paused(app) == before, name
        mismatched = await op.post(path, data={"csrf_token": token, "queue": "reports"})
        assert mismatched.status_code == 400  # the form names another queue than the path
        assert await _paused(app) == before
        response = await op.post(path, data={"csrf_token": token, "queue": "emails"})
        assert response.status_code == 303
        assert response.headers["location"] == f"/?notice={action}d"
    assert await _paused(app) == (["emails"] if action == "pause" else [])


async def test_a_bad_queue_name_in_the_path_is_refused_and_nothing_changes(app: Dashboard) -> None:
    async with client_for(app, "operator") as op:
        token = await csrf_token(op, "/queues/emails/pause")
        confirm = await op.get("/queues/Not%20A%20Queue/pause")
        response = await op.post(
            "/queues/Not%20A%20Queue/pause", data={"csrf_token": token, "queue": "Not A Queue"}
        )
    assert (confirm.status_code, response.status_code) == (400, 400)
    assert "Invalid queue" in response.text
    assert await _paused(app) == []


async def test_the_anti_forgery_cookie_is_http_only_strict_and_scoped(app: Dashboard) -> None:
    async with client_for(app, "operator") as op:
        response = await op.get("/dead-letters")
    cookie = response.headers["set-cookie"].lower()
    assert cookie.startswith(COOKIE + "=")
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert "path=/" in cookie
    async with client_for(app, "reader") as reader:
        response = await reader.get("/dead-letters")
    assert "set-cookie" not in response.headers, "read-only users get no token"
    assert "csrf_token" not in response.text
    assert "Replay" not in response.text
    async with client_for(app, "reader") as reader:
        overview = await reader.get("/")
    assert "/pause" not in overview.text, "read-only users get no pause action"


# ----- the loopback-only default ----------------------------------------------------------


@pytest.fixture
async def local_only(db_url: str) -> AsyncIterator[Dashboard]:
    built = dashboard(db_url)
    try:
        yield built
    finally:
        await built.close()


@pytest.mark.parametrize(
    ("client", "headers", "allowed"),
    [
        (("127.0.0.1", 5000), {"host": "127.0.0.1:8765"}, True),
        (("127.0.0.1", 5000), {"host": "localhost:8765"}, True),
        (("::1", 5000), {"host": "[::1]:8765"}, True),
        (("127.0.0.2", 5000), {"host": "localhost"}, True),
        (("10.1.2.3", 5000), {"host": "127.0.0.1:8765"}, False),
        (("192.168.1.20", 5000), {"host": "dashboard.internal"}, False),
        (("127.0.0.1", 5000), {"host": "127.0.0.1", "x-forwarded-for": "203.0.113.9"}, False),
        (("127.0.0.1", 5000), {"host": "127.0.0.1", "forwarded": "for=203.0.113.9"}, False),
        (("127.0.0.1", 5000), {"host": "127.0.0.1", "x-real-ip": "203.0.113.9"}, False),
        (("127.0.0.1", 5000), {"host": "127.0.0.1", "client-ip": "203.0.113.9"}, False),
        (("127.0.0.1", 5000), {"host": "127.0.0.1", "x-cluster-client-ip": "203.0.113.9"}, False),
        (("127.0.0.1", 5000), {"host": "127.0.0.1", "fastly-client-ip": "203.0.113.9"}, False),
        (("127.0.0.1", 5000), {"host": "127.0.0.1", "fly-client-ip": "203.0.113.9"}, False),
        (("127.0.0.1", 5000), {"host": "127.0.0.1", "do-connecting-ip": "203.0.113.9"}, False),
        (("127.0.0.1", 5000), {"host": "127.0.0.1", "x-forwarded": "for=203.0.113.9"}, False),
        (("127.0.0.1", 5000), {"host": "127.0.0.1", "x_forwarded_for": "203.0.113.9"}, False),
        (("127.0.0.1", 5000), {"host": "attacker.example:8765"}, False),
        (("127.0.0.1", 5000), {"host": "localhost:65535"}, True),
        (("127.0.0.1", 5000), {"host": "localhost:65536"}, False),
        (("127.0.0.1", 5000), {"host": "127.0.0.1:99999"}, False),
        (("::1", 5000), {"host": "[::1]:70000"}, False),
        (("127.0.0.1", 5000), {"host": "localhost:0"}, False),
        (("127.0.0.1", 5000), {"host": "localhost:08765"}, False),
    ],
)
async def test_without_authorize_only_local_requests_are_answered(
    local_only: Dashboard, client: tuple[str, int], headers: dict[str, str], allowed: bool
) -> None:
    transport = httpx.ASGITransport(app=local_only, client=client)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as http:
        for path in ("/", "/jobs", "/dead-letters", "/workers", "/static/dashboard.css"):
            response = await http.get(path, headers=headers)
            if allowed:
                assert response.status_code == 200, path
                continue
            assert response.status_code == 403, path
            assert "answers only local requests" in response.text
            assert "Overview" not in response.text


async def test_a_refused_remote_post_changes_nothing(local_only: Dashboard, seeded: Seeded) -> None:
    dead = seeded.dead[0]
    before = await _dead_letters(local_only)
    transport = httpx.ASGITransport(app=local_only, client=("10.0.0.7", 4000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        response = await http.post(
            f"/jobs/{dead.job_id}/replay", data={"queue": dead.queue, "tenant": dead.tenant_id}
        )
    assert response.status_code == 403
    assert await _dead_letters(local_only) == before


async def test_a_local_user_is_an_operator_and_still_needs_the_token(
    local_only: Dashboard, seeded: Seeded
) -> None:
    dead = seeded.dead[0]
    form = {"queue": dead.queue, "tenant": dead.tenant_id}
    transport = httpx.ASGITransport(app=local_only, client=("127.0.0.1", 4000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        refused = await http.post(f"/jobs/{dead.job_id}/replay", data=form)
        assert refused.status_code == 403
        token = await csrf_token(http, f"/jobs/{dead.job_id}/replay?{urlencode(form)}")
        done = await http.post(f"/jobs/{dead.job_id}/replay", data={**form, "csrf_token": token})
    assert done.status_code == 303
    status = await local_only.reader.get_status(dead.job_id, dead.queue, dead.tenant_id)
    assert status is not None
    assert status.state.value == "ready"


async def test_an_async_authorize_works_and_a_wrong_answer_is_an_error(
    db_url: str, seeded: Seeded
) -> None:
    async def allow(request: object) -> object:
        return USERS["reader"]

    built = dashboard(db_url, authorize=allow)  # type: ignore[arg-type]
    try:
        async with client_for(built, "anonymous") as http:
            assert (await http.get("/")).status_code == 200
    finally:
        await built.close()
    wrong = dashboard(db_url, authorize=lambda request: "operator")  # type: ignore[arg-type,return-value]
    try:
        async with client_for(wrong, "anonymous") as http:
            with pytest.raises(TypeError):
                await http.get("/")
    finally:
        await wrong.close()


async def test_a_wrong_authorize_answer_is_part_of_the_error_tree(db_url: str) -> None:
    wrong = dashboard(db_url, authorize=lambda request: object())  # type: ignore[arg-type,return-value]
    try:
        async with client_for(wrong, "anonymous") as http:
            with pytest.raises(PrincipalTypeError) as caught:
                await http.get("/")
    finally:
        await wrong.close()
    assert isinstance(caught.value, CaravelError)
    assert isinstance(caught.value, TypeError)
