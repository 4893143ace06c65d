"""Cancelling and deleting every job of a queue that a filter matches, from the dashboard, as an
operator: the jobs listing links to a confirmation page that changes nothing and counts what
would change (a dry run through the queue), and only the POST of its form acts; the listing then
says how many changed. A filter without a queue, or one the queue cannot apply, is a 400."""

from __future__ import annotations

import httpx
import pytest

from caravel.web import Dashboard
from caravel.web.filters import Filters, removal_query
from tests.integration.dashboard.test_access import _snapshot
from tests.support.dashboard.fixtures import client_for, csrf_token
from tests.support.dashboard.seed import Seeded


async def _counts(app: Dashboard, queue: str) -> dict[str, int]:
    (found,) = [c for c in await app.reader.queue_counts() if c.queue == queue]
    return {
        "waiting": found.ready + found.delayed,
        "running": found.running + found.expired,
        "dead_letter": found.dead_letter,
        "completed": found.completed,
        "cancelled": found.cancelled,
    }


async def test_an_operator_cancels_the_waiting_jobs_of_a_queue_after_counting_them(
    app: Dashboard, seeded: Seeded, operator: httpx.AsyncClient
) -> None:
    waiting = (
        seeded.counts["billing.invoices"]["ready"] + seeded.counts["billing.invoices"]["delayed"]
    )
    listing = await operator.get("/jobs?queue=billing.invoices&state=delayed")
    assert 'href="/jobs/cancel?queue=billing.invoices&amp;state=ready"' in listing.text
    assert "Delete matching…" not in listing.text  # a delayed job is never deleted
    before = await _snapshot(app)

    shown = await operator.get("/jobs/cancel?queue=billing.invoices&state=ready")
    too_young = await operator.get("/jobs/cancel?queue=billing.invoices&older_than=1m")

    assert shown.status_code == 200
    assert f'<strong id="matching">{waiting}</strong> jobs match (ready {waiting})' in shown.text
    assert f"Cancel {waiting} jobs</button>" in shown.text
    assert "nothing to cancel" in too_young.text  # enqueued at the dashboard's now
    assert await _snapshot(app) == before, "a confirmation page changed something"

    token = await csrf_token(operator, "/jobs/cancel?queue=billing.invoices")
    form = {"csrf_token": token, "queue": "billing.invoices", "state": "ready"}
    done = await operator.post("/jobs/cancel", data=form)

    assert done.status_code == 303
    assert done.headers["location"] == f"/jobs?queue=billing.invoices&cancelled={waiting}"
    after = await operator.get(done.headers["location"])
    assert f"Cancelled {waiting} jobs." in after.text
    counts = await _counts(app, "billing.invoices")
    assert (counts["waiting"], counts["cancelled"]) == (0, waiting)
    assert counts["completed"] == seeded.counts["billing.invoices"]["completed"]
    again = await operator.post("/jobs/cancel", data=form)
    assert again.status_code == 409
    assert "Nothing cancelled" in again.text


async def test_a_delete_by_filter_removes_only_finished_jobs(
    app: Dashboard, seeded: Seeded, operator: httpx.AsyncClient
) -> None:
    reports = seeded.counts["reports"]
    finished = reports["completed"] + reports["dead_letter"]
    before = await _counts(app, "reports")
    listing = await operator.get("/jobs?queue=reports&tenant=globex")
    assert 'href="/jobs/delete?queue=reports&amp;tenant=globex"' in listing.text
    assert 'href="/jobs/cancel?queue=reports&amp;tenant=globex"' in listing.text

    shown = await operator.get("/jobs/delete?queue=reports")
    assert f'<strong id="matching">{finished}</strong>' in shown.text
    assert "This cannot be undone." in shown.text
    token = await csrf_token(operator, "/jobs/delete?queue=reports")
    done = await operator.post("/jobs/delete", data={"csrf_token": token, "queue": "reports"})

    assert done.status_code == 303
    assert done.headers["location"] == f"/jobs?queue=reports&deleted={finished}"
    assert f"Deleted {finished} jobs." in (await operator.get(done.headers["location"])).text
    after = await _counts(app, "reports")
    assert (after["completed"], after["dead_letter"]) == (0, 0)
    assert after["waiting"] == before["waiting"] > 0, "a waiting job was deleted"
    assert seeded.retrying is not None
    assert await app.reader.get_status(seeded.retrying.job_id, "reports", "globex") is not None


async def test_a_filter_without_a_queue_is_refused_and_changes_nothing(
    app: Dashboard, operator: httpx.AsyncClient
) -> None:
    before = await _snapshot(app)
    listing = await operator.get("/jobs")
    assert "Cancel matching…" not in listing.text
    assert "Filter by one queue to cancel or delete" in listing.text
    token = await csrf_token(operator, "/jobs/cancel?queue=emails")
    for verb in ("cancel", "delete"):
        shown = await operator.get(f"/jobs/{verb}?tenant=acme")
        posted = await operator.post(f"/jobs/{verb}", data={"csrf_token": token, "tenant": "acme"})
        assert (shown.status_code, posted.status_code) == (400, 400), verb
        assert "Choose a queue" in shown.text
        assert "Choose a queue" in posted.text
    assert await _snapshot(app) == before


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("state=completed", "State: a cancel takes only ready, running."),
        ("older_than=7+days", "Older than: must be a whole number and a unit"),
        ("older_than=0s", "older_than: must be more than 0"),
        ("tag=vip", "Tag: a cancel by filter cannot select by tag"),
        ("tenant=" + "x" * 200, "Tenant:"),
    ],
)
async def test_a_filter_the_queue_cannot_apply_is_a_400_naming_the_field(
    app: Dashboard, operator: httpx.AsyncClient, query: str, said: str
) -> None:
    before = await _snapshot(app)
    shown = await operator.get(f"/jobs/cancel?queue=emails&{query}")
    assert shown.status_code == 400
    assert said in shown.text
    assert 'type="submit" class="danger"' not in shown.text
    token = await csrf_token(operator, "/jobs/cancel?queue=emails")
    field, _, value = query.partition("=")
    posted = await operator.post(
        "/jobs/cancel",
        data={"csrf_token": token, "queue": "emails", field: value.replace("+", " ")},
    )
    assert posted.status_code == 400
    assert await _snapshot(app) == before


def test_the_listing_links_only_to_what_a_cancel_or_delete_by_filter_can_do() -> None:
    assert removal_query(Filters(), deleting=False) is None  # no queue
    assert removal_query(Filters(queue="emails", tag="vip"), deleting=False) is None
    assert removal_query(Filters(queue="emails", state="expired"), deleting=False) == {
        "queue": "emails",
        "state": "running",
    }
    assert removal_query(Filters(queue="emails", state="expired"), deleting=True) is None
    assert removal_query(Filters(queue="emails", state="completed"), deleting=False) is None
    assert removal_query(
        Filters(queue="emails", tenant="acme", job_type="emails.send.v1", state="cancelled"),
        deleting=True,
    ) == {"queue": "emails", "tenant": "acme", "type": "emails.send.v1", "state": "cancelled"}


async def test_a_reader_gets_no_bulk_links(app: Dashboard) -> None:
    async with client_for(app, "reader") as reader:
        read = await reader.get("/jobs?queue=emails")
    assert read.status_code == 200
    assert "Cancel matching…" not in read.text
    assert "Delete matching…" not in read.text
