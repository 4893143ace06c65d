"""The attempt history on the dashboard, on every database, made by a real worker: the job page
lists a job's attempts newest first (outcome, category, exception class, the safe detail as
text, worker, times, retry), the running attempt on top, and how many older records were
dropped; the dead-letter list shows each job's last exception class and safe detail. Exception
messages and payloads appear on neither; another tenant's or queue's address finds nothing."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import AsyncIterator
from datetime import timedelta
from urllib.parse import urlencode
from uuid import UUID

import pytest
from markupsafe import escape

from caravel import Leases
from caravel.web import Dashboard
from tests.support import Add, dispatch, open_queue
from tests.support.dashboard import history
from tests.support.dashboard.fixtures import client_for, make_dashboard
from tests.support.dashboard.seed import END

#: One attempt of the timeline: its number and outcome.
ROW = re.compile(r'<li class="attempt" data-attempt="(\d+)" data-outcome="(\w+)">')
START = END - timedelta(minutes=10)


@pytest.fixture
async def made(db_url: str) -> history.History:
    return await history.run(db_url, start=START)


@pytest.fixture
async def app(db_url: str) -> AsyncIterator[Dashboard]:
    built = make_dashboard(db_url)
    try:
        yield built
    finally:
        await built.close()


async def _get(app: Dashboard, path: str, user: str = "reader") -> tuple[int, str]:
    async with client_for(app, user) as client:
        response = await client.get(path)
        return response.status_code, response.text


def _job(job_id: UUID, queue: str = history.QUEUE, tenant: str = history.TENANT) -> str:
    return f"/jobs/{job_id}?" + urlencode({"queue": queue, "tenant": tenant})


def _no_secrets(page: str) -> None:
    assert history.SECRET not in page
    assert "4111" not in page
    assert "<script>window.__detail" not in page
    assert '"order"' not in page  # the payload's fields: not for a reader


async def test_the_job_page_lists_each_attempt_newest_first(
    app: Dashboard, made: history.History
) -> None:
    status, page = await _get(app, _job(made.recovered))

    assert status == 200
    assert ROW.findall(page) == [("2", "completed"), ("1", "failed")]
    _no_secrets(page)
    timeline = page[
        page.index('id="attempt-timeline"') : page.index(
            "</ol>", page.index('id="attempt-timeline"')
        )
    ]
    completed, failed = timeline.split('<li class="attempt"')[1:]
    assert '<span class="badge attempt-completed">completed</span>' in completed
    assert "Retry at" not in completed
    assert '<span class="badge attempt-failed">failed</span>' in failed
    assert '<span class="category">HandlerFailed</span>' in failed
    assert '<code class="error-class">caravel.directives.JobFailed</code>' in failed
    assert str(escape(f"{history.DETAIL} (attempt 1)")) in failed
    # The worker that ran it: this host and process, and its registry id.
    assert f"{socket.gethostname()} pid {os.getpid()}" in failed
    assert "worker …" in failed
    assert "<dt>Duration</dt><dd>1.2 s</dd>" in failed
    assert "<dt>Retry at</dt>" in failed
    assert 'id="attempts-dropped"' not in page


async def test_dropped_records_are_counted_and_the_rest_shown(
    app: Dashboard, made: history.History
) -> None:
    status, page = await _get(app, _job(made.dead))

    assert status == 200
    assert ROW.findall(page) == [("3", "failed"), ("2", "failed")]  # keep=2 of 3
    assert "1 older attempt record was dropped" in page
    assert str(escape(f"{history.DETAIL} (redacted)")) in page
    assert "tests.support.dashboard.history.CardDeclined" in page
    _no_secrets(page)


async def test_another_tenant_or_queue_finds_no_job_and_no_history(
    app: Dashboard, made: history.History
) -> None:
    for path in (
        _job(made.recovered, tenant="globex"),
        _job(made.recovered, queue="emails"),
        _job(made.recovered, tenant=""),
    ):
        status, page = await _get(app, path)
        assert status == 404
        assert 'id="attempt-timeline"' not in page
        assert "provider answered" not in page


async def test_the_running_attempt_is_on_top_with_its_lease_expiry(
    app: Dashboard, db_url: str
) -> None:
    async with open_queue(db_url) as queue:
        job_id = (await queue.enqueue(Add(1), dispatch())).job_id
        status, waiting = await _get(app, _job(job_id, "default", "tenant-a"))
        claimed = await Leases(queue).claim("default")
        assert claimed is not None
    _, running = await _get(app, _job(job_id, "default", "tenant-a"))

    assert status == 200
    assert "No attempts recorded." in waiting
    assert ROW.findall(running) == [("1", "running")]
    assert "<dt>Lease expires</dt>" in running


async def test_the_dead_letter_list_shows_the_last_class_and_detail(
    app: Dashboard, made: history.History
) -> None:
    status, page = await _get(app, "/dead-letters")

    assert status == 200
    rows = re.findall(r'<tr data-job="([^"]+)">(.*?)</tr>', page, re.S)
    assert [UUID(job_id) for job_id, _ in rows] == [made.dead]  # the recovered job completed
    row = rows[0][1]
    # The failure's category and the last exception's class, breakable after each dot.
    assert (
        '<td data-label="Failure">HandlerFailed<br><code class="error-class">'
        "tests.<wbr>support.<wbr>dashboard.<wbr>history.<wbr>CardDeclined</code></td>"
    ) in row
    # The detail on a row of its own under the job's, across every column, as text.
    [(span, text)] = re.findall(
        rf'<tr class="detail-row" data-detail-for="{made.dead}">\s*<td colspan="(\d+)"'
        r'.*?<span class="detail" title="[^"]*">(.*?)</span>',
        page,
        re.S,
    )
    assert int(span) == row.count("<td ")
    assert text == escape(f"{history.DETAIL} (redacted)")
    _no_secrets(page)


async def test_a_last_attempt_without_a_detail_shows_none(app: Dashboard, db_url: str) -> None:
    async with open_queue(db_url, max_attempts=1) as queue:
        job_id = (await queue.enqueue(Add(1), dispatch())).job_id
        claimed = await Leases(queue).claim("default")
        assert claimed is not None
        await Leases(queue).fail(claimed.lease, "InvalidPayload")
    _, page = await _get(app, "/dead-letters")

    [row] = re.findall(rf'<tr data-job="{job_id}">(.*?)</tr>', page, re.S)
    assert '<td data-label="Failure">InvalidPayload</td>' in row  # no class either
    assert "detail-row" not in page
