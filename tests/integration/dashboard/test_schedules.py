"""The dashboard's schedules page: every schedule the database has state for, with its last
slot and whether it is paused; an operator pauses and resumes a schedule from it (a confirmation
page, then a POST with the anti-forgery token naming the schedule of its address), a read-only
user sees no action and is refused."""

from __future__ import annotations

import httpx
import pytest

from caravel.web import Dashboard
from caravel.web.csrf import COOKIE
from tests.support.dashboard.fixtures import client_for, csrf_token


async def test_the_page_lists_the_schedules_state(
    operator: httpx.AsyncClient, app: Dashboard
) -> None:
    empty = await operator.get("/schedules")
    assert empty.status_code == 200
    assert "No schedule has run a slot or been paused yet." in empty.text

    store = app.writer.store
    now = app.reader.clock.now_ms()
    slot = now - now % 60_000
    await store.schedule_advance("nightly-digest", slot, now)
    await app.writer.pause_schedule("heartbeat")
    page = (await operator.get("/schedules")).text
    assert 'aria-current="page">Schedules<' in page
    heartbeat = page[page.index('data-schedule="heartbeat"') :]
    heartbeat = heartbeat[: heartbeat.index("</tr>")]
    assert "paused" in heartbeat
    assert "none yet" in heartbeat
    nightly = page[page.index('data-schedule="nightly-digest"') :]
    nightly = nightly[: nightly.index("</tr>")]
    assert "running" in nightly
    assert "none yet" not in nightly
    # By name: heartbeat first.
    assert page.index('data-schedule="heartbeat"') < page.index('data-schedule="nightly-digest"')


# ----- pausing and resuming from the page -------------------------------------------------


def _row(page: str, name: str) -> str:
    row = page[page.index(f'data-schedule="{name}"') :]
    return row[: row.index("</tr>")]


async def _stored(app: Dashboard) -> dict[str, bool]:
    """Each schedule's pause as stored in ``caravel_schedules``, read back through the
    dashboard's read-only connection."""
    return {s.name: s.paused_at is not None for s in await app.reader.list_schedules()}


async def test_an_operator_pauses_and_resumes_a_schedule_from_the_page(
    operator: httpx.AsyncClient, app: Dashboard
) -> None:
    now = app.reader.clock.now_ms()
    await app.writer.store.schedule_advance("heartbeat", now - now % 60_000, now)
    page = (await operator.get("/schedules")).text
    assert 'href="/schedules/heartbeat/pause">Pause</a>' in _row(page, "heartbeat")
    assert "/resume" not in _row(page, "heartbeat")

    confirm = await operator.get("/schedules/heartbeat/pause")
    assert confirm.status_code == 200
    assert "Pause schedule <strong>heartbeat</strong> for every scheduler?" in confirm.text
    assert await _stored(app) == {"heartbeat": False}, "a confirmation page writes nothing"
    token = await csrf_token(operator, "/schedules/heartbeat/pause")
    form = {"csrf_token": token, "schedule": "heartbeat"}
    done = await operator.post("/schedules/heartbeat/pause", data=form)
    assert (done.status_code, done.headers["location"]) == (303, "/schedules?notice=paused")
    assert await _stored(app) == {"heartbeat": True}
    after = (await operator.get(done.headers["location"])).text
    assert "Paused: every scheduler passes its slots over" in after
    assert 'data-col="state">paused<' in _row(after, "heartbeat")
    assert 'href="/schedules/heartbeat/resume">Resume</a>' in _row(after, "heartbeat")
    again = await operator.post("/schedules/heartbeat/pause", data=form)
    assert again.status_code == 303  # paused already: as asked, nothing changes
    assert await _stored(app) == {"heartbeat": True}

    confirm = await operator.get("/schedules/heartbeat/resume")
    assert "Resume schedule <strong>heartbeat</strong>?" in confirm.text
    done = await operator.post(
        "/schedules/heartbeat/resume", data={"csrf_token": token, "schedule": "heartbeat"}
    )
    assert (done.status_code, done.headers["location"]) == (303, "/schedules?notice=resumed")
    assert await _stored(app) == {"heartbeat": False}
    after = (await operator.get("/schedules")).text
    assert 'data-col="state">running<' in _row(after, "heartbeat")


async def test_a_schedule_never_run_can_be_paused_ahead_of_its_first_slot(
    operator: httpx.AsyncClient, app: Dashboard
) -> None:
    token = await csrf_token(operator, "/schedules/new-report/pause")
    done = await operator.post(
        "/schedules/new-report/pause", data={"csrf_token": token, "schedule": "new-report"}
    )
    assert done.status_code == 303
    assert await _stored(app) == {"new-report": True}


@pytest.mark.parametrize("action", ["pause", "resume"])
async def test_a_schedule_post_without_a_valid_token_or_naming_another_schedule_writes_nothing(
    app: Dashboard, action: str
) -> None:
    path = f"/schedules/heartbeat/{action}"
    if action == "resume":
        await app.writer.pause_schedule("heartbeat")
    before = await _stored(app)
    async with client_for(app, "operator") as op:
        token = await csrf_token(op, path)
        for data in ({}, {"csrf_token": ""}, {"csrf_token": "A" * 43}):
            response = await op.post(path, data={"schedule": "heartbeat", **data})
            assert response.status_code == 403, data
            assert "The form has expired" in response.text
        cookie = op.cookies[COOKIE]
        op.cookies.clear()
        response = await op.post(path, data={"schedule": "heartbeat", "csrf_token": token})
        assert response.status_code == 403, "a token without its cookie"
        op.cookies.set(COOKIE, cookie)
        assert await _stored(app) == before
        mismatched = await op.post(path, data={"csrf_token": token, "schedule": "nightly"})
        assert mismatched.status_code == 400  # the form names another schedule than the path
        assert "Invalid schedule" in mismatched.text
        missing = await op.post(path, data={"csrf_token": token})
        assert missing.status_code == 400
        assert await _stored(app) == before
        response = await op.post(path, data={"csrf_token": token, "schedule": "heartbeat"})
        assert response.status_code == 303
    assert await _stored(app) == {"heartbeat": action == "pause"}


@pytest.mark.parametrize("name", ["Not%20A%20Schedule", "UPPER", "x" * 65, "bad!name"])
async def test_a_bad_schedule_name_in_the_path_is_a_400_and_nothing_is_written(
    app: Dashboard, name: str
) -> None:
    async with client_for(app, "operator") as op:
        token = await csrf_token(op, "/schedules/heartbeat/pause")
        for action in ("pause", "resume"):
            confirm = await op.get(f"/schedules/{name}/{action}")
            response = await op.post(
                f"/schedules/{name}/{action}", data={"csrf_token": token, "schedule": name}
            )
            assert (confirm.status_code, response.status_code) == (400, 400), action
            assert "Invalid schedule" in response.text
    assert await _stored(app) == {}


async def test_a_read_only_user_sees_no_action_and_is_refused(app: Dashboard) -> None:
    await app.writer.pause_schedule("heartbeat")
    now = app.reader.clock.now_ms()
    await app.writer.store.schedule_advance("nightly-digest", now - now % 60_000, now)
    before = await _stored(app)
    async with client_for(app, "reader") as reader, client_for(app, "operator") as op:
        page = await reader.get("/schedules")
        assert page.status_code == 200
        assert 'data-col="state">paused<' in _row(page.text, "heartbeat")
        assert "/pause" not in page.text
        assert "/resume" not in page.text
        assert "Action" not in page.text
        assert "csrf_token" not in page.text
        for path in ("/schedules/heartbeat/resume", "/schedules/nightly-digest/pause"):
            assert (await reader.get(path)).status_code == 403
            # The best a read-only user could send: a valid token, but the operator's.
            token = await csrf_token(op, path)
            reader.cookies.set(COOKIE, op.cookies[COOKIE])
            name = path.split("/")[2]
            refused = await reader.post(path, data={"csrf_token": token, "schedule": name})
            reader.cookies.clear()
            assert refused.status_code == 403
            assert "Not allowed" in refused.text
    assert await _stored(app) == before
