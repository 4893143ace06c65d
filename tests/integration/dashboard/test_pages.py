"""The dashboard's pages over a seeded queue, through real HTTP requests to the ASGI app on
every database: what each page shows, filters, paging, clamping, escaping, and the replay
flows."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from caravel import JobState, Leases
from caravel.web import Dashboard
from caravel.web.replay import CHUNK
from tests.support.dashboard.fixtures import client_for, csrf_token, make_dashboard
from tests.support.dashboard.seed import QUEUES, XSS_NOTE, XSS_TENANT, Seeded

ROW = re.compile(r'<tr data-job="([0-9a-f-]{36})">')


def _count(page: str, key: str) -> int:
    found = re.search(rf'data-count="{key}">(\d+)<', page)
    assert found is not None, key
    return int(found.group(1))


def _cell(page: str, queue: str, column: str) -> str:
    row = page[page.index(f'<tr data-queue="{queue}">') :]
    row = row[: row.index("</tr>")]
    found = re.search(rf'data-col="{column}">(.*?)</td>', row)
    assert found is not None, (queue, column)
    return re.sub(r"<[^>]+>", "", found.group(1))


async def test_overview_shows_the_counts_of_every_queue(
    operator: httpx.AsyncClient, seeded: Seeded
) -> None:
    response = await operator.get("/")
    assert response.status_code == 200
    page = response.text
    for state in ("ready", "delayed", "running", "expired", "dead_letter", "completed"):
        assert _count(page, state) == seeded.total(state), state
    for queue in QUEUES:
        for state in ("ready", "delayed", "running", "expired", "dead_letter", "completed"):
            assert _cell(page, queue, state) == str(seeded.counts[queue][state]), (queue, state)


async def test_overview_charts_count_the_last_hour(
    operator: httpx.AsyncClient, seeded: Seeded
) -> None:
    page = (await operator.get("/")).text
    done = re.search(r"<strong>(\d+)</strong> completed, per 5 minutes", page)
    dead = re.search(r"<strong>(\d+)</strong> moved to dead letter", page)
    assert done is not None
    assert dead is not None
    assert int(done.group(1)) == seeded.total("completed")
    assert int(dead.group(1)) == seeded.total("dead_letter")
    # Server-side SVG with a text alternative; one bar per five minutes of the hour.
    chart = page[page.index('<svg class="chart tone-ok"') :]
    chart = chart[: chart.index("</svg>")]
    assert 'role="img"' in chart
    assert f"{seeded.total('completed')} completed in the last hour" in chart
    assert chart.count("<rect") == 12
    assert page.count('<svg class="spark') == 2 * len(QUEUES)


async def test_overview_and_workers_show_the_registry(
    operator: httpx.AsyncClient, seeded: Seeded
) -> None:
    overview = (await operator.get("/")).text
    assert ">1 running</a>" in overview
    assert "1 lost</strong>" in overview
    page = (await operator.get("/workers")).text
    for name, worker_id in seeded.workers.items():
        row = page[page.index(f'data-worker="{worker_id}"') :]
        row = row[: row.index("</tr>")]
        assert f'class="badge worker-{name}"' in row
    assert 'data-count="lost">1<' in page
    assert "7 min ago" in page  # the lost worker's last heartbeat


async def test_jobs_filter_by_queue_tenant_state_and_type(
    operator: httpx.AsyncClient, seeded: Seeded, app: Dashboard
) -> None:
    cases = [
        {"queue": "webhooks"},
        {"tenant": "umbrella"},
        {"state": "dead_letter"},
        {"type": "emails.send.v1"},
        {"queue": "emails", "state": "dead_letter", "type": "emails.send.v1"},
        {"queue": "reports", "tenant": "globex", "state": "ready"},
    ]
    for query in cases:
        response = await operator.get("/jobs?" + urlencode({**query, "per_page": 200}))
        assert response.status_code == 200
        shown = ROW.findall(response.text)
        expected = await app.reader.list_jobs(
            queue=query.get("queue"),
            tenant_id=query.get("tenant"),
            shown_state=query.get("state"),
            job_type=query.get("type"),
            limit=200,
        )
        assert shown == [str(job.job_id) for job in expected], query
        assert shown, query
    dead = (await operator.get("/jobs?state=dead_letter&per_page=200")).text
    assert len(ROW.findall(dead)) == seeded.total("dead_letter")


SHOWN = ("ready", "delayed", "running", "expired", "dead_letter", "completed")


async def test_jobs_filter_and_show_states_in_the_status_words(
    operator: httpx.AsyncClient, seeded: Seeded
) -> None:
    """Every state ``caravel status`` counts is a filter of the jobs table, matching the
    overview's count, and each listed job shows that state: an ended lease is "expired", not
    "running"."""
    for state in SHOWN:
        page = (await operator.get(f"/jobs?state={state}&per_page=200")).text
        shown = ROW.findall(page)
        assert len(shown) == seeded.total(state), state
        badges = re.findall(r'<span class="badge job-([a-z_]+)">', page)
        assert badges == [state] * len(shown), state
        assert f'<option value="{state}" selected>' in page
    assert seeded.total("expired") > 0
    assert seeded.total("delayed") > 0
    everything = (await operator.get("/jobs?per_page=200")).text
    assert everything.count('class="badge job-expired"') == seeded.total("expired")


async def test_each_overview_tile_links_to_its_own_jobs(operator: httpx.AsyncClient) -> None:
    page = (await operator.get("/")).text
    tiles = dict(re.findall(r'<a href="([^"]+)"><span class="n" data-count="([a-z_]+)">', page))
    links = {state: html.unescape(href) for href, state in tiles.items()}
    for state in ("ready", "delayed", "running", "expired", "completed"):
        assert links[state] == f"/jobs?state={state}", state
    assert links["dead_letter"] == "/dead-letters"


async def test_jobs_page_and_sort_by_time(operator: httpx.AsyncClient, app: Dashboard) -> None:
    everything = [str(j.job_id) for j in await app.reader.list_jobs(limit=10_000)]
    assert len(everything) > 20
    first = (await operator.get("/jobs?per_page=20")).text
    second = (await operator.get("/jobs?per_page=20&page=2")).text
    assert ROW.findall(first) == everything[:20]
    assert ROW.findall(second) == everything[20:40]
    assert 'rel="next"' in first
    assert 'rel="prev"' not in first
    assert 'rel="prev"' in second
    oldest = (await operator.get("/jobs?per_page=20&order=oldest")).text
    assert ROW.findall(oldest) == list(reversed(everything))[:20]
    assert 'aria-sort="ascending"' in oldest
    assert 'aria-sort="descending"' in first
    last_page = -(-len(everything) // 20)
    final = (await operator.get(f"/jobs?per_page=20&page={last_page}")).text
    assert 'rel="next"' not in final


@pytest.mark.parametrize(
    ("query", "page", "per_page"),
    [
        ("page=-5", 1, 50),
        ("page=abc", 1, 50),
        ("page=99999999999999999999999", 1, 50),
        ("page=1e3", 1, 50),
        ("page=999999", 5000, 50),
        ("per_page=0", 1, 20),
        ("per_page=100000", 1, 200),
        ("per_page=-3&page=0", 1, 20),
    ],
)
async def test_numeric_parameters_are_clamped(
    operator: httpx.AsyncClient, query: str, page: int, per_page: int
) -> None:
    response = await operator.get("/jobs?" + query)
    assert response.status_code == 200
    assert f"<span>Page {page}</span>" in response.text or page == 1
    assert f'<option value="{per_page}" selected>' in response.text


async def test_invalid_filters_are_reported_not_used(operator: httpx.AsyncClient) -> None:
    response = await operator.get("/jobs?queue=No%20Such!&state=exploded&type=A%2FB")
    assert response.status_code == 400
    assert "Queue: must be 1 to 64 characters" in response.text
    assert (
        "State: must be ready, delayed, held, running, expired, dead_letter, completed, cancelled."
        in response.text
    )
    assert "Job type: must be" in response.text
    assert "No Such!" not in response.text.replace("&#34;", '"')
    tenant = await operator.get("/jobs?tenant=%01bell")
    assert tenant.status_code == 400
    assert "Tenant: must not contain control characters." in tenant.text


async def test_job_page_shows_state_timeline_attempts_and_failure(
    operator: httpx.AsyncClient, seeded: Seeded
) -> None:
    job = seeded.retrying
    assert job is not None
    url = f"/jobs/{job.job_id}?" + urlencode({"queue": job.queue, "tenant": job.tenant_id})
    page = (await operator.get(url)).text
    assert str(job.job_id) in page
    assert "1 of 3" in page
    assert "HandlerFailed</strong>: the handler raised an exception" in page
    for label in ("Created", "Due", "Last claimed", "Finished"):
        assert f"<strong>{label}</strong>" in page or label == "Finished"
    assert "attempt 2 runs no earlier than this (retry backoff)" in page
    # The attempt that failed, from its record (tests/integration/dashboard/test_attempts.py).
    assert '<li class="attempt" data-attempt="1" data-outcome="failed">' in page
    running = seeded.running
    assert running is not None
    query = urlencode({"queue": running.queue, "tenant": running.tenant_id})
    page = (await operator.get(f"/jobs/{running.job_id}?{query}")).text
    assert "the lease expires in 5 min" in page
    assert "<strong>Lease expires</strong>" in page


async def test_payloads_only_for_those_allowed(app: Dashboard, seeded: Seeded) -> None:
    job = seeded.dead[0]
    url = f"/jobs/{job.job_id}?" + urlencode({"queue": job.queue, "tenant": job.tenant_id})
    async with client_for(app, "operator") as op, client_for(app, "reader") as reader:
        shown = (await op.get(url)).text
        hidden = (await reader.get(url)).text
    assert '<pre class="payload"' in shown
    assert '<pre class="payload"' not in hidden
    assert "Hidden: your account may not see job payloads" in hidden
    payload = await app.reader.get_payload(job.job_id, job.queue, job.tenant_id)
    assert payload is not None
    for value in re.findall(r'"[^"]*":("[^"]*")', payload):
        assert html.escape(value.strip('"'), quote=True) not in hidden or value == '""'


async def test_unknown_or_mismatched_jobs_are_not_found(
    operator: httpx.AsyncClient, seeded: Seeded
) -> None:
    job = seeded.dead[0]
    for url in (
        f"/jobs/{job.job_id}?queue={job.queue}&tenant=someone-else",
        f"/jobs/{job.job_id}?queue=other&tenant={job.tenant_id}",
        f"/jobs/{job.job_id}",
        "/jobs/not-a-uuid?queue=emails&tenant=acme",
        "/nowhere",
        "/static/../app.py",
        "/replays/unknown",
    ):
        response = await operator.get(url)
        assert response.status_code == 404, url


async def test_user_text_is_escaped_everywhere(operator: httpx.AsyncClient, seeded: Seeded) -> None:
    job = seeded.xss_job
    assert job is not None
    owner = urlencode({"queue": job.queue, "tenant": job.tenant_id})
    pages = [
        "/jobs?queue=emails&per_page=200",
        "/dead-letters",
        f"/jobs/{job.job_id}?{owner}",
        f"/jobs/{job.job_id}/replay?{owner}",
        "/jobs?" + urlencode({"tenant": XSS_TENANT}),
        "/dead-letters/replay?" + urlencode({"tenant": XSS_TENANT}),
    ]
    for url in pages:
        page = (await operator.get(url)).text
        assert XSS_TENANT not in page, url
        assert "<img" not in page, url
        assert "onerror=" not in page.replace("onerror=&#34;", ""), url
        assert html.escape(XSS_TENANT) in page or "&lt;img src=x" in page, url
    payload_page = (await operator.get(f"/jobs/{job.job_id}?{owner}")).text
    assert "<script>" not in payload_page
    assert "&lt;/script&gt;&lt;script&gt;window.__xss=2" in payload_page
    assert XSS_NOTE not in payload_page


async def test_security_headers(operator: httpx.AsyncClient) -> None:
    response = await operator.get("/")
    csp = response.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "script-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["cache-control"] == "no-store"
    assert "https://" not in response.text.replace("https://hooks.example.com", "")
    css = await operator.get("/static/dashboard.css")
    assert css.headers["content-type"].startswith("text/css")
    assert "http" not in css.text


async def test_replay_one_dead_letter(
    operator: httpx.AsyncClient, seeded: Seeded, app: Dashboard
) -> None:
    job = seeded.dead[0]
    form = {"queue": job.queue, "tenant": job.tenant_id}
    confirm = f"/jobs/{job.job_id}/replay?{urlencode(form)}"
    page = (await operator.get(confirm)).text
    assert "Any side effects of its earlier attempts happen again" in page
    token = await csrf_token(operator, confirm)
    response = await operator.post(f"/jobs/{job.job_id}/replay", data={**form, "csrf_token": token})
    assert response.status_code == 303
    landed = await operator.get(response.headers["location"])
    assert "Replayed: the job is ready again" in landed.text
    status = await app.reader.get_status(job.job_id, job.queue, job.tenant_id)
    assert status is not None
    assert status.state is JobState.READY
    assert status.attempt == 0
    again = await operator.post(f"/jobs/{job.job_id}/replay", data={**form, "csrf_token": token})
    assert again.status_code == 409
    assert "no longer a dead letter" in again.text
    page = (await operator.get(confirm)).text
    assert "not a dead letter" in page
    assert "csrf_token" not in page


async def test_replay_a_filtered_selection_with_progress(
    operator: httpx.AsyncClient, seeded: Seeded, app: Dashboard
) -> None:
    webhooks = [ref for ref in seeded.dead if ref.queue == "webhooks"]
    confirm = (await operator.get("/dead-letters/replay?queue=webhooks")).text
    assert f'<strong id="matching">{len(webhooks)}</strong>' in confirm
    token = await csrf_token(operator, "/dead-letters/replay?queue=webhooks")
    response = await operator.post(
        "/dead-letters/replay", data={"queue": "webhooks", "csrf_token": token}
    )
    assert response.status_code == 303
    await app.replays.wait()
    progress = (await operator.get(response.headers["location"])).text
    assert "Replay finished" in progress
    assert f'max="{len(webhooks)}" value="{len(webhooks)}"' in progress
    assert f"<strong>{len(webhooks)} replayed</strong>" in progress
    assert 'data-refresh="0"' in progress
    counts = {c.queue: c for c in await app.reader.queue_counts()}
    assert counts["webhooks"].dead_letter == 0
    assert counts["emails"].dead_letter == seeded.counts["emails"]["dead_letter"]
    nothing = await operator.post(
        "/dead-letters/replay", data={"queue": "webhooks", "csrf_token": token}
    )
    assert nothing.status_code == 409


async def test_a_large_selection_is_replayed_in_chunks(db_url: str) -> None:
    from caravel import DatabaseQueue, DispatchOptions, QueueOptions
    from caravel.testing import ManualClock
    from tests.support.dashboard.seed import END, SendEmail, registry

    clock = ManualClock(END)
    total = CHUNK * 2 + 7
    async with DatabaseQueue(
        db_url, registry, clock=clock, options=QueueOptions(max_attempts=1)
    ) as queue:
        await queue.enqueue_many(
            (
                SendEmail(to=f"u{n}@example.com", template="t"),
                DispatchOptions(queue="bulk", tenant_id=f"t{n % 3}"),
            )
            for n in range(total)
        )
        claimed = await Leases(queue).claim_many("bulk", total)
        for job in claimed:
            await Leases(queue).fail(job.lease, "HandlerFailed")
    built = make_dashboard(db_url)
    try:
        async with client_for(built, "operator") as op:
            token = await csrf_token(op, "/dead-letters/replay?queue=bulk&tenant=t1")
            page = (await op.get("/dead-letters/replay?queue=bulk&tenant=t1")).text
            expected = len(range(1, total, 3))
            assert f'<strong id="matching">{expected}</strong>' in page
            response = await op.post(
                "/dead-letters/replay", data={"queue": "bulk", "tenant": "t1", "csrf_token": token}
            )
            await built.replays.wait()
            run = built.replays.get(response.headers["location"].rsplit("/", 1)[1])
            assert run is not None
            assert (run.total, run.processed, run.replayed, run.error) == (
                expected,
                expected,
                expected,
                None,
            )
        (counts,) = await built.reader.queue_counts("bulk")
        assert counts.dead_letter == total - expected
        assert counts.ready == expected
    finally:
        await built.close()


@pytest.fixture
async def mounted(db_url: str, seeded: Seeded) -> AsyncIterator[tuple[Starlette, Dashboard]]:
    ops = make_dashboard(db_url)
    host = Starlette(routes=[Mount("/ops", app=ops)])
    try:
        yield host, ops
    finally:
        await ops.close()


async def test_mounted_under_a_prefix_every_link_and_form_keeps_it(
    mounted: tuple[Starlette, Dashboard], seeded: Seeded
) -> None:
    host, ops = mounted
    transport = httpx.ASGITransport(app=host)
    headers = {"x-test-user": "operator"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://localhost", headers=headers
    ) as client:
        page = (await client.get("/ops/")).text
        links = re.findall(r'(?:href|action|src)="([^"]+)"', page)
        assert links
        assert all(link.startswith(("/ops/", "#")) for link in links), links
        for link in set(links) - {"#main"}:
            response = await client.get(html.unescape(link))
            assert response.status_code == 200, link
        dead = seeded.dead[0]
        form = {"queue": dead.queue, "tenant": dead.tenant_id}
        confirm = (await client.get(f"/ops/jobs/{dead.job_id}/replay?{urlencode(form)}")).text
        assert f'action="/ops/jobs/{dead.job_id}/replay"' in confirm
        cookie = client.cookies.jar
        assert any(c.path == "/ops/" for c in cookie)
        token = re.search(r'name="csrf_token" value="([^"]+)"', confirm)
        assert token is not None
        done = await client.post(
            f"/ops/jobs/{dead.job_id}/replay", data={**form, "csrf_token": token.group(1)}
        )
        assert done.status_code == 303
        assert done.headers["location"].startswith(f"/ops/jobs/{dead.job_id}?")
    status = await ops.reader.get_status(dead.job_id, dead.queue, dead.tenant_id)
    assert status is not None
    assert status.state is JobState.READY


async def test_an_operator_pauses_and_resumes_a_queue_from_the_overview(
    operator: httpx.AsyncClient, seeded: Seeded, app: Dashboard
) -> None:
    await app.writer.pause_queue("idle")  # paused with no jobs at all: still listed
    page = (await operator.get("/")).text
    assert _cell(page, "idle", "paused").startswith("paused since")
    assert _cell(page, "emails", "paused") == "running"
    assert 'href="/queues/emails/pause">Pause</a>' in page
    assert 'href="/queues/idle/resume">Resume</a>' in page

    confirm = await operator.get("/queues/emails/pause")
    assert "Pause queue <strong>emails</strong> for every worker?" in confirm.text
    token = await csrf_token(operator, "/queues/emails/pause")
    form = {"csrf_token": token, "queue": "emails"}
    done = await operator.post("/queues/emails/pause", data=form)
    assert (done.status_code, done.headers["location"]) == (303, "/?notice=paused")
    after = (await operator.get(done.headers["location"])).text
    assert "Paused: workers claim none of its jobs" in after
    assert _cell(after, "emails", "paused").startswith("paused since")
    # Counts are as before: pausing moves no job.
    assert _cell(after, "emails", "ready") == str(seeded.counts["emails"]["ready"])

    again = await operator.post("/queues/emails/pause", data=form)
    assert again.status_code == 303  # already paused: as asked, nothing changes
    resumed = await operator.post("/queues/emails/resume", data=form)
    assert resumed.headers["location"] == "/?notice=resumed"
    assert [p.queue for p in await app.reader.paused_queues()] == ["idle"]
