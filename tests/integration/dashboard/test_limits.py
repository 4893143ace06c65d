"""A queue's concurrency limits and rate on the dashboard: the overview's "Limits" table and the
queue's limits page show the caps, the jobs running and the ready jobs waiting because of a
limit (and the busiest keys), the rate and the weight started in its window, as the inspector
reads them; an operator sets and clears the limits and the rate with the page's forms
(anti-forgery token, the queue named twice), each change logged with who made it; bad input is
the page again with a 400 naming the field, and nothing changes. Who may reach which route is
``test_access``'s walk."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import timedelta

import httpx
import pytest

from caravel import (
    ConcurrencyLimit,
    DatabaseQueue,
    DispatchOptions,
    JobContext,
    JobRegistry,
    Leases,
    RateLimit,
)
from caravel.testing import ManualClock
from caravel.web import Dashboard
from tests.support.dashboard.fixtures import client_for, csrf_token
from tests.support.dashboard.seed import END, registry

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
    assert (
        _cell(overview.text, "limited", "emails", "rate"),
        _cell(overview.text, "limited", "emails", "used"),
    ) == ("—", "—")
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


# ----- the rate -------------------------------------------------------------------------------

RATE = f"{PAGE}/rate"

Rates = list[tuple[str, int | None, int | None, int | None, timedelta | None]]


async def _rates(app: Dashboard) -> Rates:
    return [
        (q.queue, q.concurrency, q.rate, q.rate_per_key, q.period)
        for q in await app.reader.queue_limits()
    ]


async def _claim(url: str, jobs: int) -> int:
    """Start up to ``jobs`` of the emails queue as a worker would, under its limits."""
    async with DatabaseQueue(url, registry, clock=ManualClock(END)) as queue:
        return len(await Leases(queue).claim_many("emails", jobs, limited=True))


async def test_an_operator_sets_a_rate_and_sees_it_and_what_its_window_used(
    app: Dashboard, operator: httpx.AsyncClient, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await app.writer.set_queue_limit(ConcurrencyLimit(queue="emails", concurrency=3))
    page = await operator.get(PAGE)
    assert 'id="rate"' not in page.text
    assert "No rate:" in page.text
    assert "Clear the rate" not in page.text
    token = await csrf_token(operator, PAGE)
    form = {"csrf_token": token, "queue": "emails", "rate": "10", "rate_per_key": "2"}
    with caplog.at_level(logging.INFO, logger="caravel.web"):
        done = await operator.post(RATE, data={**form, "period": "60"})
    assert done.status_code == 303
    assert done.headers["location"] == f"{PAGE}?notice=rate-set"
    # The rate is stored beside the cap, which stays.
    assert await _rates(app) == [("emails", 3, 10, 2, timedelta(minutes=1))]
    (record,) = [r for r in caplog.records if r.name == "caravel.web"]
    assert record.getMessage() == "queue rate limit set from the dashboard"
    logged = (record.queue, record.rate, record.rate_per_key, record.period_ms)  # type: ignore[attr-defined]
    assert logged == ("emails", 10, 2, 60_000)
    assert record.principal == "otto@example.com"  # type: ignore[attr-defined]

    assert await _claim(db_url, 2) == 2  # two starts of weight 1 in the window
    page = await operator.get(f"{PAGE}?notice=rate-set")
    assert "Rate stored" in page.text
    shown = {col: _cell(page.text, "rate", "emails", col) for col in ("rate", "rate_per_key")}
    assert shown == {"rate": "10", "rate_per_key": "2"}
    assert _cell(page.text, "rate", "emails", "period") == "60 s"
    assert _cell(page.text, "rate", "emails", "used") == "2"
    assert _cell(page.text, "limits", "emails", "concurrency") == "3"
    overview = await operator.get("/")
    assert _cell(overview.text, "limited", "emails", "rate") == "10 per 60 s (2 per key)"
    assert _cell(overview.text, "limited", "emails", "used") == "2"
    # The form shows the stored rate, and the clear button is there.
    assert 'name="rate" min="1" max="1000000" value="10"' in page.text
    assert 'name="rate_per_key" min="1" max="1000000" value="2"' in page.text
    assert 'name="period" min="1" max="86400" value="60"' in page.text
    assert "Clear the rate" in page.text

    # Set again with only a rate per key and the period left blank: the rate goes, 1 second.
    await operator.post(RATE, data={**form, "rate": "", "period": ""})
    assert await _rates(app) == [("emails", 3, None, 2, timedelta(seconds=1))]
    page = await operator.get(PAGE)
    assert _cell(page.text, "rate", "emails", "rate") == "—"
    assert _cell(page.text, "rate", "emails", "period") == "1 s"
    overview = await operator.get("/")
    assert _cell(overview.text, "limited", "emails", "rate") == "2 per key per 1 s"


async def test_an_operator_clears_the_rate_and_the_caps_stay(
    app: Dashboard, operator: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    await app.writer.set_queue_limit(ConcurrencyLimit(queue="emails", concurrency=3, fair=True))
    await app.writer.set_queue_limit(RateLimit(queue="emails", rate=5))
    token = await csrf_token(operator, PAGE)
    form = {"csrf_token": token, "queue": "emails", "only": "rate"}
    with caplog.at_level(logging.INFO, logger="caravel.web"):
        done = await operator.post(f"{PAGE}/clear", data=form)
        again = await operator.post(f"{PAGE}/clear", data=form)
    assert done.headers["location"] == f"{PAGE}?notice=rate-cleared"
    assert again.headers["location"] == f"{PAGE}?notice=no-rate"
    assert await _rates(app) == [("emails", 3, None, None, None)]
    assert await _fairness(app) == [("emails", True, {})]
    logged = [r for r in caplog.records if r.name == "caravel.web"]
    assert {r.getMessage() for r in logged} == {"queue rate limit cleared from the dashboard"}
    assert [(r.kind, r.changed) for r in logged] == [("rate", True), ("rate", False)]  # type: ignore[attr-defined]
    page = await operator.get(f"{PAGE}?notice=rate-cleared")
    assert "Rate cleared" in page.text
    assert "No rate:" in page.text
    assert _cell(page.text, "limits", "emails", "concurrency") == "3"
    assert "Clear the rate" not in page.text
    assert "Clear the limits" in page.text


async def test_clearing_the_limits_removes_the_rate_too(
    app: Dashboard, operator: httpx.AsyncClient
) -> None:
    await app.writer.set_queue_limit(ConcurrencyLimit(queue="emails", concurrency=3))
    await app.writer.set_queue_limit(RateLimit(queue="emails", rate=5))
    token = await csrf_token(operator, PAGE)
    only_caps = {"csrf_token": token, "queue": "emails", "only": "concurrency"}
    done = await operator.post(f"{PAGE}/clear", data=only_caps)
    assert done.headers["location"] == f"{PAGE}?notice=concurrency-cleared"
    assert await _rates(app) == [("emails", None, 5, None, timedelta(seconds=1))]
    done = await operator.post(f"{PAGE}/clear", data={"csrf_token": token, "queue": "emails"})
    assert done.headers["location"] == f"{PAGE}?notice=limits-cleared"
    assert await _rates(app) == []
    refused = await operator.post(f"{PAGE}/clear", data={**only_caps, "only": "fair"})
    assert refused.status_code == 400
    assert "only: must be" in refused.text


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"rate": "0"}, "rate"),
        ({"rate": "-5"}, "rate"),
        ({"rate": "1000001"}, "rate"),
        ({"rate": "2.5"}, "rate"),
        ({"rate_per_key": "0"}, "rate_per_key"),
        ({"rate_per_key": "ten"}, "rate_per_key"),
        ({"rate": "5", "period": "0"}, "period"),
        ({"rate": "5", "period": "86401"}, "period"),
        ({"rate": "5", "period": "1.5"}, "period"),
        ({"rate": "5", "period": "-1"}, "period"),
        ({"period": "5"}, "rate"),  # neither rate: clear it instead
        ({}, "rate"),
    ],
)
async def test_a_bad_rate_is_refused_naming_the_field_and_nothing_changes(
    app: Dashboard, operator: httpx.AsyncClient, form: dict[str, str], field: str
) -> None:
    await app.writer.set_queue_limit(RateLimit(queue="emails", rate=7))
    before = await _rates(app)
    token = await csrf_token(operator, PAGE)
    response = await operator.post(RATE, data={"csrf_token": token, "queue": "emails", **form})
    assert response.status_code == 400
    alert = re.search(r'role="alert"><p>(.*?)</p>', response.text, re.S)
    assert alert is not None, "the page says what was refused"
    assert alert.group(1).startswith(f"<strong>Nothing was changed.</strong> {field}: ")
    assert _cell(response.text, "rate", "emails", "rate") == "7"  # the page, as stored
    assert await _rates(app) == before


@dataclass(frozen=True)
class Heavy:
    n: int


async def _heavy(job: Heavy, ctx: JobContext[None]) -> None:
    pass


async def test_a_rate_below_a_waiting_jobs_weight_is_refused_naming_the_field(
    app: Dashboard, operator: httpx.AsyncClient, db_url: str
) -> None:
    heavy = JobRegistry()
    heavy.register("emails.heavy.v1", Heavy, _heavy, weight=5)
    async with DatabaseQueue(db_url, heavy, clock=ManualClock(END)) as queue:
        await queue.enqueue(Heavy(1), DispatchOptions(queue="emails"))
    token = await csrf_token(operator, PAGE)
    form = {"csrf_token": token, "queue": "emails"}
    for given, field in (({"rate": "4"}, "rate"), ({"rate_per_key": "4"}, "rate_per_key")):
        response = await operator.post(RATE, data={**form, **given})
        assert response.status_code == 400
        assert f"{field}: must be at least 5, the weight of a job waiting" in response.text
    assert await _rates(app) == []
    done = await operator.post(RATE, data={**form, "rate": "5", "rate_per_key": "5"})
    assert done.status_code == 303
    assert await _rates(app) == [("emails", None, 5, 5, timedelta(seconds=1))]


async def test_a_rate_form_without_the_token_or_for_another_queue_changes_nothing(
    app: Dashboard, operator: httpx.AsyncClient
) -> None:
    await app.writer.set_queue_limit(RateLimit(queue="emails", rate=7))
    before = await _rates(app)
    token = await csrf_token(operator, PAGE)  # the cookie; the token only where given
    tokenless = await operator.post(RATE, data={"queue": "emails", "rate": "2"})
    cleared = await operator.post(f"{PAGE}/clear", data={"queue": "emails", "only": "rate"})
    assert (tokenless.status_code, cleared.status_code) == (403, 403)
    assert "The form has expired" in tokenless.text
    other = await operator.post(RATE, data={"csrf_token": token, "queue": "reports", "rate": "2"})
    assert other.status_code == 400
    assert await _rates(app) == before


async def test_a_reader_sees_the_rate_but_may_not_change_it(app: Dashboard) -> None:
    await app.writer.set_queue_limit(RateLimit(queue="emails", rate=7, period=timedelta(hours=1)))
    before = await _rates(app)
    async with client_for(app, "reader") as reader:
        page = await reader.get(PAGE)
        refused = await reader.post(RATE, data={"queue": "emails", "rate": "2"})
        cleared = await reader.post(f"{PAGE}/clear", data={"queue": "emails", "only": "rate"})
    assert page.status_code == 200
    assert _cell(page.text, "rate", "emails", "rate") == "7"
    assert _cell(page.text, "rate", "emails", "period") == "3600 s"
    assert _cell(page.text, "rate", "emails", "used") == "0"
    assert "<form" not in page.text
    assert "Change the rate" not in page.text
    assert (refused.status_code, cleared.status_code) == (403, 403)
    assert "Not allowed" in refused.text
    assert await _rates(app) == before
