"""A queue's concurrency limits on the dashboard: the overview's "Limits" table and the queue's
limits page show the caps, the jobs running and the ready jobs waiting because of a limit (and
the busiest keys), as the inspector reads them; an operator sets and clears the limits with the
page's forms (anti-forgery token, the queue named twice), each change logged with who made it;
bad input is a 400 naming the field, and nothing changes. Who may reach which route is
``test_access``'s walk."""

from __future__ import annotations

import logging
import re

import httpx
import pytest

from caravel import ConcurrencyLimit
from caravel.web import Dashboard
from tests.support.dashboard.fixtures import client_for, csrf_token

PAGE = "/queues/emails/limits"


async def _stored(app: Dashboard) -> list[tuple[str, int | None, int | None]]:
    return [(q.queue, q.concurrency, q.per_key) for q in await app.reader.queue_limits()]


def _cell(html: str, table: str, row: str, col: str) -> str:
    """The text of one cell: the row whose ``data-queue`` (or ``data-key``) is ``row``."""
    body = html[html.index(f'id="{table}"') :]
    body = body[: body.index("</table>")]
    found = re.search(rf'data-(?:queue|key)="{re.escape(row)}">(.*?)</tr>', body, re.S)
    assert found is not None, (table, row)
    cell = re.search(rf'data-col="{col}">(.*?)</td>', found.group(1), re.S)
    assert cell is not None, (table, row, col)
    return cell.group(1).strip()


async def test_an_operator_sets_limits_and_sees_what_runs_and_waits(
    app: Dashboard, operator: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    overview = await operator.get("/")
    assert 'id="limited"' not in overview.text  # no queue is limited yet
    assert f'href="{PAGE}"' in overview.text  # the operator's way there
    token = await csrf_token(operator, PAGE)
    with caplog.at_level(logging.INFO, logger="caravel.web"):
        done = await operator.post(
            PAGE, data={"csrf_token": token, "queue": "emails", "concurrency": "1", "per_key": "1"}
        )
    assert done.status_code == 303
    assert done.headers["location"] == f"{PAGE}?notice=limits-set"
    assert await _stored(app) == [("emails", 1, 1)]
    (record,) = [r for r in caplog.records if r.name == "caravel.web"]
    assert record.getMessage() == "queue concurrency limit set from the dashboard"
    assert (record.queue, record.concurrency, record.per_key) == ("emails", 1, 1)  # type: ignore[attr-defined]
    assert record.principal == "otto@example.com"  # type: ignore[attr-defined]

    (usage,) = await app.reader.queue_limit_usage("emails")
    (counts,) = await app.reader.queue_counts("emails")
    # One job runs (the seed's), at the cap of one: every ready job waits.
    assert (usage.running, usage.waiting) == (1, counts.ready)
    assert counts.ready > 0
    overview = await operator.get("/")
    assert _cell(overview.text, "limited", "emails", "concurrency") == "1"
    assert _cell(overview.text, "limited", "emails", "running") == "1"
    assert _cell(overview.text, "limited", "emails", "waiting") == str(counts.ready)
    page = await operator.get(f"{PAGE}?notice=limits-set")
    assert "Limits stored" in page.text
    assert _cell(page.text, "limits", "emails", "waiting") == str(counts.ready)
    for key in usage.keys:
        assert _cell(page.text, "keys", key.key, "running") == str(key.running)
        assert _cell(page.text, "keys", key.key, "waiting") == str(key.waiting)
    assert [k.key for k in usage.keys][:1] == ["acme"]  # the running job's tenant first


async def test_an_operator_clears_limits(
    app: Dashboard, operator: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    await app.writer.set_queue_limit(ConcurrencyLimit(queue="emails", concurrency=3))
    token = await csrf_token(operator, PAGE)
    assert "Clear the limits" in (await operator.get(PAGE)).text
    with caplog.at_level(logging.INFO, logger="caravel.web"):
        done = await operator.post(f"{PAGE}/clear", data={"csrf_token": token, "queue": "emails"})
        again = await operator.post(f"{PAGE}/clear", data={"csrf_token": token, "queue": "emails"})
    assert done.headers["location"] == f"{PAGE}?notice=limits-cleared"
    assert again.headers["location"] == f"{PAGE}?notice=no-limits"
    assert await _stored(app) == []
    logged = [r for r in caplog.records if r.name == "caravel.web"]
    assert [r.changed for r in logged] == [True, False]  # type: ignore[attr-defined]
    page = await operator.get(PAGE)
    assert "No concurrency limits" in page.text
    assert "Clear the limits" not in page.text


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"concurrency": "0"}, "concurrency"),
        ({"concurrency": "100001"}, "concurrency"),
        ({"per_key": "-2"}, "per_key"),
        ({"per_key": "two"}, "per_key"),
        ({"concurrency": "1e3"}, "concurrency"),
        ({}, "concurrency"),  # neither cap: clear instead
    ],
)
async def test_a_bad_cap_is_refused_naming_the_field_and_nothing_changes(
    app: Dashboard, operator: httpx.AsyncClient, form: dict[str, str], field: str
) -> None:
    await app.writer.set_queue_limit(ConcurrencyLimit(queue="emails", concurrency=5))
    token = await csrf_token(operator, PAGE)
    response = await operator.post(PAGE, data={"csrf_token": token, "queue": "emails", **form})
    assert response.status_code == 400
    assert f"{field}:" in response.text
    assert await _stored(app) == [("emails", 5, None)]


async def test_a_form_for_another_queue_or_a_bad_name_changes_nothing(
    app: Dashboard, operator: httpx.AsyncClient
) -> None:
    token = await csrf_token(operator, PAGE)
    other = await operator.post(
        PAGE, data={"csrf_token": token, "queue": "reports", "concurrency": "2"}
    )
    bad = await operator.post(
        "/queues/Not%20A%20Queue/limits",
        data={"csrf_token": token, "queue": "Not A Queue", "concurrency": "2"},
    )
    shown = await operator.get("/queues/Not%20A%20Queue/limits")
    assert (other.status_code, bad.status_code, shown.status_code) == (400, 400, 400)
    assert await _stored(app) == []


async def test_without_the_token_nothing_changes(
    app: Dashboard, operator: httpx.AsyncClient
) -> None:
    await csrf_token(operator, PAGE)  # the cookie, but no token in the form
    response = await operator.post(PAGE, data={"queue": "emails", "concurrency": "2"})
    assert response.status_code == 403
    cleared = await operator.post(f"{PAGE}/clear", data={"queue": "emails"})
    assert cleared.status_code == 403
    assert await _stored(app) == []


async def test_a_reader_sees_the_limits_but_no_form(app: Dashboard) -> None:
    await app.writer.set_queue_limit(ConcurrencyLimit(queue="emails", per_key=2))
    async with client_for(app, "reader") as reader:
        page = await reader.get(PAGE)
        overview = await reader.get("/")
    assert page.status_code == 200
    assert _cell(page.text, "limits", "emails", "per_key") == "2"
    assert "<form" not in page.text
    assert _cell(overview.text, "limited", "emails", "per_key") == "2"


async def _fairness(app: Dashboard) -> list[tuple[str, bool, dict[str, int]]]:
    return [(q.queue, q.fair, dict(q.weights)) for q in await app.reader.queue_limits()]


async def test_an_operator_turns_fair_dispatch_on_and_off(
    app: Dashboard, operator: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    token = await csrf_token(operator, PAGE)
    form = {"csrf_token": token, "queue": "emails", "fair": "on", "weights": "acme=3\r\nbig=2\r\n"}
    with caplog.at_level(logging.INFO, logger="caravel.web"):
        done = await operator.post(PAGE, data=form)
    assert done.headers["location"] == f"{PAGE}?notice=limits-set"
    assert await _fairness(app) == [("emails", True, {"acme": 3, "big": 2})]
    (record,) = [r for r in caplog.records if r.name == "caravel.web"]
    assert (record.fair, record.weights) == (True, 2)  # type: ignore[attr-defined]
    assert "acme" not in str(record.__dict__)  # keys are tenant ids: never logged
    page = await operator.get(PAGE)
    assert _cell(page.text, "limits", "emails", "fair") == "yes (acme=3, big=2)"
    assert 'name="fair" value="on" checked' in page.text
    assert "acme=3\nbig=2\n</textarea>" in page.text  # the form keeps the weights
    overview = await operator.get("/")
    assert _cell(overview.text, "limited", "emails", "fair") == "yes (acme=3, big=2)"
    # Set again without the tick: fairness and weights go, the cap stays.
    off = {"csrf_token": token, "queue": "emails", "concurrency": "4"}
    await operator.post(PAGE, data=off)
    assert await _fairness(app) == [("emails", False, {})]
    page = await operator.get(PAGE)
    assert _cell(page.text, "limits", "emails", "fair") == "—"
    assert 'value="on" checked' not in page.text


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"fair": "yes"}, "fair"),
        ({"fair": "on", "weights": "acme"}, "weights"),
        ({"fair": "on", "weights": "acme=x"}, "weights"),
        ({"fair": "on", "weights": "acme=0"}, "weights"),
        ({"fair": "on", "weights": "acme=1001"}, "weights"),
        ({"fair": "on", "weights": "acme=1\nacme=2"}, "weights"),
        ({"fair": "on", "weights": "=2"}, "weights"),
        ({"weights": "acme=2"}, "weights"),  # weights without fair dispatch
    ],
)
async def test_a_bad_fairness_is_refused_naming_the_field_and_nothing_changes(
    app: Dashboard, operator: httpx.AsyncClient, form: dict[str, str], field: str
) -> None:
    await app.writer.set_queue_limit(ConcurrencyLimit(queue="emails", fair=True, weights={"b": 2}))
    token = await csrf_token(operator, PAGE)
    response = await operator.post(PAGE, data={"csrf_token": token, "queue": "emails", **form})
    assert response.status_code == 400
    assert f"{field}:" in response.text
    assert await _fairness(app) == [("emails", True, {"b": 2})]


async def test_fairness_without_the_token_changes_nothing(
    app: Dashboard, operator: httpx.AsyncClient
) -> None:
    await csrf_token(operator, PAGE)
    response = await operator.post(PAGE, data={"queue": "emails", "fair": "on"})
    assert response.status_code == 403
    assert await _fairness(app) == []
