"""The dashboard in a real browser: Debian's Chromium, driven by Playwright, against a real
uvicorn server on a loopback port, over a seeded queue on every database.

Waiting here is for a real server and browser (Playwright's auto-waiting ``expect``); the queue
itself runs on a hand-moved clock.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, TypeVar
from urllib.parse import urlencode
from uuid import UUID

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from caravel import (
    DatabaseQueue,
    DispatchOptions,
    JobContext,
    JobRegistry,
    JobState,
    QueueInspector,
    QueueWorker,
    WorkerOptions,
)
from caravel.testing import ManualClock
from caravel.web import Dashboard
from tests.support.dashboard.browser import chromium
from tests.support.dashboard.fixtures import USER_COOKIE, USERS, make_dashboard
from tests.support.dashboard.links import add_links
from tests.support.dashboard.seed import (
    END,
    LONG_QUEUES,
    QUEUES,
    STATES,
    XSS_NOTE,
    XSS_TENANT,
    JobRef,
    Seeded,
    registry,
    seed_long_queues,
)
from tests.support.dashboard.server import post_from_another_site, serving

T = TypeVar("T")


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to the end on a fresh event loop in another thread (Playwright's sync
    API keeps its own loop running in this one)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.usefixtures("need_chromium")]


@dataclass
class Live:
    base: str
    app: Dashboard
    seeded: Seeded
    url: str

    def dead_letters(self) -> int:
        async def count() -> int:
            async with QueueInspector(self.url) as reader:
                return sum(c.dead_letter for c in await reader.queue_counts())

        return run_async(count())

    def status(self, ref: JobRef) -> JobState:
        async def read() -> JobState:
            async with QueueInspector(self.url) as reader:
                found = await reader.get_status(ref.job_id, ref.queue, ref.tenant_id)
                assert found is not None
                return found.state

        return run_async(read())


@pytest.fixture
def live(db_url: str, seeded_sync: Seeded) -> Iterator[Live]:
    app = make_dashboard(db_url, refresh_seconds=1)
    with serving(app) as base:
        yield Live(base, app, seeded_sync, db_url)


class Served(Protocol):
    """A dashboard served for a test: where it answers."""

    base: str


def as_user(browser: BrowserContext, live: Served, user: str) -> Page:
    """A new page of ``browser`` signed in (by the test ``authorize``'s cookie) as ``user``."""
    browser.clear_cookies()
    if user != "anonymous":
        browser.add_cookies([{"name": USER_COOKIE, "value": user, "url": live.base}])
    page = browser.new_page()
    page.on("dialog", lambda dialog: pytest.fail(f"a dialog opened: {dialog.message}"))
    return page


def job_path(ref: JobRef, suffix: str = "") -> str:
    return f"/jobs/{ref.job_id}{suffix}?" + urlencode({"queue": ref.queue, "tenant": ref.tenant_id})


def test_overview_shows_the_counts_of_the_seeded_database(
    live: Live, browser: BrowserContext
) -> None:
    page = as_user(browser, live, "reader")
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(live.base + "/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Overview")
    for state in STATES:
        expect(page.locator(f'[data-count="{state}"]')).to_have_text(str(live.seeded.total(state)))
    for queue in QUEUES:
        row = page.locator(f'tr[data-queue="{queue}"]')
        for state in STATES:
            expect(row.locator(f'[data-col="{state}"]')).to_have_text(
                str(live.seeded.counts[queue][state])
            )
    charts = page.get_by_role("img", name=re.compile("^(Completed|Dead-lettered)$"))
    expect(charts).to_have_count(2)
    expect(
        page.get_by_text(f"{live.seeded.total('completed')} completed, per 5 minutes")
    ).to_be_visible()
    # The stylesheet and script loaded from the dashboard itself, within its CSP.
    assert page.evaluate("getComputedStyle(document.body).margin") == "0px"
    expect(page.locator("#refresh-toggle")).to_be_visible()
    assert errors == []
    # The delayed and expired tiles open the jobs in exactly those states.
    for state in ("delayed", "expired"):
        page.goto(live.base + "/")
        page.locator(f'a:has([data-count="{state}"])').click()
        expect(page).to_have_url(re.compile(rf"/jobs\?state={state}$"))
        rows = page.locator("tr[data-job]")
        expect(rows).to_have_count(live.seeded.total(state))
        expect(rows.locator(f".badge.job-{state}")).to_have_count(live.seeded.total(state))


def test_filtering_and_sorting_the_jobs_table(live: Live, browser: BrowserContext) -> None:
    page = as_user(browser, live, "reader")
    page.goto(live.base + "/jobs")
    page.get_by_label("Queue", exact=True).fill("webhooks")
    page.get_by_label("State", exact=True).select_option("dead_letter")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"queue=webhooks.*state=dead_letter"))
    rows = page.locator("#jobs tbody tr")
    expected = live.seeded.counts["webhooks"]["dead_letter"]
    expect(rows).to_have_count(expected)
    for i in range(expected):
        expect(rows.nth(i)).to_contain_text("webhooks")
        expect(rows.nth(i)).to_contain_text("dead letter")

    page.get_by_label("Queue", exact=True).fill("")
    page.get_by_label("State", exact=True).select_option("")
    page.get_by_label("Tenant", exact=True).fill("initech")
    page.get_by_label("Job type", exact=True).fill("billing.invoice.v1")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("#jobs tbody tr")
    expect(rows.first).to_be_visible()
    for i in range(rows.count()):
        expect(rows.nth(i).locator("td.tenant")).to_have_text("initech")
        expect(rows.nth(i)).to_contain_text("billing.invoice.v1")

    newest = rows.first.get_attribute("data-job")
    page.get_by_role("link", name=re.compile("^Created")).click()
    expect(page.locator('th[aria-sort="ascending"]')).to_be_visible()
    assert page.locator("#jobs tbody tr").last.get_attribute("data-job") == newest

    page.goto(live.base + "/jobs?per_page=20")
    first_page = page.locator("#jobs tbody tr").first.get_attribute("data-job")
    page.get_by_role("link", name="Next →").click()
    expect(page.get_by_text("Page 2", exact=True)).to_be_visible()
    assert page.locator("#jobs tbody tr").first.get_attribute("data-job") != first_page
    page.get_by_role("link", name="← Previous").click()
    expect(page.locator("#jobs tbody tr").first).to_have_attribute("data-job", first_page or "")


def test_a_batch_from_the_list_to_its_jobs(live: Live, browser: BrowserContext) -> None:
    links = run_async(add_links(live.url))
    batch = links.batch
    page = as_user(browser, live, "reader")
    page.goto(live.base + "/")
    page.get_by_role("link", name="Batches", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Batches")
    row = page.locator(f'tr[data-batch="{batch.batch_id}"]')
    expect(row.locator('td[data-label="Pending"]')).to_have_text("2")
    row.locator('td[data-label="Batch"] a').click()
    expect(page.locator("#batch-total")).to_have_text("2")
    expect(page.locator("#callback-state")).to_have_text("waiting (held)")
    page.get_by_role("link", name="Open its jobs").click()
    expect(page).to_have_url(re.compile(f"/jobs\\?batch={batch.batch_id}"))
    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(len(batch.job_ids))
    shown = {rows.nth(i).get_attribute("data-job") for i in range(len(batch.job_ids))}
    assert shown == {str(job_id) for job_id in batch.job_ids}


def test_replay_a_dead_letter_and_see_it_complete_after_a_worker_runs(
    live: Live, browser: BrowserContext
) -> None:
    dead = next(
        ref for ref in live.seeded.dead if ref.queue == "emails" and ref.tenant_id != XSS_TENANT
    )
    page = as_user(browser, live, "operator")
    page.goto(live.base + "/dead-letters?queue=emails")
    row = page.locator(f'tr[data-job="{dead.job_id}"]')
    row.get_by_role("link", name=re.compile("^Replay")).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Replay a dead letter")
    expect(
        page.get_by_text("Any side effects of its earlier attempts happen again.")
    ).to_be_visible()
    page.get_by_role("button", name="Replay this job").click()

    expect(page.get_by_role("heading", level=1)).to_contain_text("Job")
    expect(page.get_by_role("status")).to_contain_text("Replayed")
    expect(page.locator("#job-state")).to_have_text("ready")
    assert live.status(dead) is JobState.READY

    async def work() -> int:
        async with DatabaseQueue(live.url, registry, clock=ManualClock(END)) as queue:
            worker = QueueWorker(queue)
            ran = 0
            while await worker.run_once("emails"):
                ran += 1
            await worker.close()
            return ran

    assert run_async(work()) >= 1
    assert live.status(dead) is JobState.COMPLETED
    # The open page updates itself (every second here) and shows the outcome.
    expect(page.locator("#job-state")).to_have_text("completed", timeout=15_000)
    expect(page.get_by_role("link", name="Replay this job…")).to_have_count(0)


def test_replay_a_filtered_selection_with_confirmation_and_progress(
    live: Live, browser: BrowserContext
) -> None:
    page = as_user(browser, live, "operator")
    page.goto(live.base + "/dead-letters")
    page.get_by_label("Queue", exact=True).fill("webhooks")
    page.get_by_role("button", name="Filter").click()
    expected = live.seeded.counts["webhooks"]["dead_letter"]
    expect(page.locator("#dead-letters tbody tr")).to_have_count(expected)
    page.get_by_role("link", name="Replay all matching…").click()
    expect(page.locator("#matching")).to_have_text(str(expected))
    before = live.dead_letters()
    page.get_by_role("button", name=f"Replay {expected} dead letters").click()
    expect(page.get_by_text("Replay finished")).to_be_visible(timeout=15_000)
    progress = page.locator("#replay-progress")
    expect(progress).to_have_attribute("max", str(expected))
    expect(progress).to_have_attribute("value", str(expected))
    expect(page.locator("#replay-summary")).to_contain_text(f"{expected} replayed")
    assert live.dead_letters() == before - expected


def test_an_operator_pauses_then_resumes_a_schedule(live: Live, browser: BrowserContext) -> None:
    async def seed_schedule() -> None:
        async with DatabaseQueue(live.url, registry, clock=ManualClock(END)) as queue:
            now = queue.clock.now_ms()
            await queue.store.schedule_advance("heartbeat", now - now % 60_000, now)

    async def paused() -> dict[str, bool]:
        async with QueueInspector(live.url) as reader:
            return {s.name: s.paused_at is not None for s in await reader.list_schedules()}

    run_async(seed_schedule())
    reader = as_user(browser, live, "reader")
    reader.goto(live.base + "/schedules")
    expect(reader.locator('tr[data-schedule="heartbeat"] [data-col="state"]')).to_have_text(
        "running"
    )
    expect(reader.get_by_role("link", name="Pause")).to_have_count(0)
    reader.close()

    page = as_user(browser, live, "operator")
    page.goto(live.base + "/schedules")
    row = page.locator('tr[data-schedule="heartbeat"]')
    row.get_by_role("link", name="Pause").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Pause a schedule")
    page.get_by_role("button", name="Pause this schedule").click()
    expect(page).to_have_url(re.compile(r"/schedules\?notice=paused$"))
    expect(page.get_by_role("status")).to_contain_text("Paused")
    expect(row.locator('[data-col="state"]')).to_have_text("paused")
    assert run_async(paused()) == {"heartbeat": True}

    row.get_by_role("link", name="Resume").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Resume a schedule")
    page.get_by_role("button", name="Resume this schedule").click()
    expect(page.get_by_role("status")).to_contain_text("Resumed")
    expect(row.locator('[data-col="state"]')).to_have_text("running")
    expect(row.get_by_role("link", name="Pause")).to_be_visible()
    assert run_async(paused()) == {"heartbeat": False}


def test_an_operator_sets_then_clears_a_queues_limits(live: Live, browser: BrowserContext) -> None:
    async def limits() -> list[tuple[str, int | None, int | None]]:
        async with QueueInspector(live.url) as reader:
            return [(q.queue, q.concurrency, q.per_key) for q in await reader.queue_limits()]

    page = as_user(browser, live, "operator")
    page.goto(live.base + "/")
    expect(page.locator("#limited")).to_have_count(0)
    page.locator('#queues tr[data-queue="emails"]').get_by_role("link", name="Limits").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Limits of emails")
    page.get_by_role("spinbutton", name="Concurrency").fill("1")
    page.get_by_role("button", name="Set limits").click()
    expect(page).to_have_url(re.compile(r"/queues/emails/limits\?notice=limits-set$"))
    expect(page.get_by_role("status")).to_contain_text("Limits stored")
    row = page.locator('#limits tr[data-queue="emails"]')
    expect(row.locator('[data-col="concurrency"]')).to_have_text("1")
    expect(row.locator('[data-col="running"]')).to_have_text("1")  # the seed's running job
    assert run_async(limits()) == [("emails", 1, None)]

    page.goto(live.base + "/")
    limited = page.locator('#limited tr[data-queue="emails"]')
    expect(limited.locator('[data-col="running"]')).to_have_text("1")
    limited.get_by_role("link", name="emails").click()
    page.get_by_role("button", name="Clear the limits").click()
    expect(page.get_by_role("status")).to_contain_text("Limits cleared")
    expect(page.locator("#limits")).to_have_count(0)
    assert run_async(limits()) == []


def test_an_operator_sets_then_clears_a_queues_rate(live: Live, browser: BrowserContext) -> None:
    async def rates() -> list[tuple[str, int | None, int | None, timedelta | None]]:
        async with QueueInspector(live.url) as reader:
            found = await reader.queue_limits()
        return [(q.queue, q.rate, q.rate_per_key, q.period) for q in found]

    page = as_user(browser, live, "operator")
    page.goto(live.base + "/queues/emails/limits")
    expect(page.locator("#rate")).to_have_count(0)
    page.get_by_role("spinbutton", name="Rate", exact=True).fill("30")
    page.get_by_role("spinbutton", name="Rate per key").fill("5")
    page.get_by_role("spinbutton", name="Period in seconds").fill("60")
    page.get_by_role("button", name="Set the rate").click()
    expect(page).to_have_url(re.compile(r"/queues/emails/limits\?notice=rate-set$"))
    expect(page.get_by_role("status")).to_contain_text("Rate stored")
    row = page.locator('#rate tr[data-queue="emails"]')
    expect(row.locator('[data-col="rate"]')).to_have_text("30")
    expect(row.locator('[data-col="rate_per_key"]')).to_have_text("5")
    expect(row.locator('[data-col="period"]')).to_have_text("60 s")
    expect(row.locator('[data-col="used"]')).to_have_text("0")
    expect(page.get_by_role("spinbutton", name="Period in seconds")).to_have_value("60")
    assert run_async(rates()) == [("emails", 30, 5, timedelta(minutes=1))]

    page.get_by_role("button", name="Clear the rate").click()
    expect(page.get_by_role("status")).to_contain_text("Rate cleared")
    expect(page.locator("#rate")).to_have_count(0)
    assert run_async(rates()) == []


def test_csrf_and_authorization_in_the_browser(live: Live, browser: BrowserContext) -> None:
    dead = live.seeded.dead[0]
    gets = {
        "/": "read",
        "/jobs": "read",
        job_path(dead): "read",
        "/dead-letters": "read",
        "/workers": "read",
        "/schedules": "read",
        job_path(dead, "/replay"): "operate",
        "/dead-letters/replay?queue=emails": "operate",
    }
    before = live.dead_letters()
    for user, principal in USERS.items():
        page = as_user(browser, live, user)
        for path, needs in gets.items():
            response = page.goto(live.base + path)
            assert response is not None
            if principal is None:
                assert response.status == 401, (user, path)
                expect(page.get_by_role("heading", level=1)).to_have_text("Sign in first")
            elif not principal.can_read or (needs == "operate" and not principal.can_operate):
                assert response.status == 403, (user, path)
                expect(page.get_by_role("heading", level=1)).to_have_text("Not allowed")
            else:
                assert response.status == 200, (user, path)
        if principal is not None and principal.can_read:
            page.goto(live.base + "/dead-letters")
            replay_links = page.get_by_role("link", name=re.compile("^Replay"))
            expect(replay_links).to_have_count(
                live.seeded.total("dead_letter") + 1 if principal.can_operate else 0
            )
        # A POST this user's browser makes with whatever token it can find on the page.
        page.goto(live.base + "/")
        status = page.evaluate(
            """async ([path, queue, tenant]) => {
                const token = document.querySelector('input[name="csrf_token"]');
                const body = new URLSearchParams({queue, tenant});
                if (token) body.set('csrf_token', token.value);
                const r = await fetch(path, {method: 'POST', body, redirect: 'manual'});
                return r.status;
            }""",
            [f"/jobs/{dead.job_id}/replay", dead.queue, dead.tenant_id],
        )
        expected = 401 if principal is None else 403
        assert status == expected, user
        page.close()
    assert live.dead_letters() == before


def test_a_cross_site_form_cannot_replay(live: Live, browser: BrowserContext) -> None:
    """An attacker's page on another origin submits a replay form into the operator's browser:
    the cookies go along, but the attacker cannot know the token, so nothing happens."""
    dead = live.seeded.dead[0]
    page = as_user(browser, live, "operator")
    page.goto(live.base + "/dead-letters")  # the operator has a session and a token cookie
    before = live.dead_letters()
    response = post_from_another_site(
        page,
        f"{live.base}/jobs/{dead.job_id}/replay",
        {"queue": dead.queue, "tenant": dead.tenant_id, "csrf_token": "guessed"},
    )
    assert response.status == 403
    expect(page.get_by_role("heading", level=1)).to_have_text("The form has expired")
    assert live.dead_letters() == before
    assert live.status(dead) is JobState.DEAD_LETTER


def test_markup_in_tenant_ids_and_payloads_renders_as_text(
    live: Live, browser: BrowserContext
) -> None:
    probe = live.seeded.xss_job
    assert probe is not None
    page = as_user(browser, live, "operator")
    for path in (
        "/jobs?queue=emails&per_page=200",
        "/dead-letters",
        job_path(probe),
        job_path(probe, "/replay"),
        "/jobs?" + urlencode({"tenant": XSS_TENANT}),
    ):
        page.goto(live.base + path)
        assert page.evaluate("window.__xss") is None, path
        assert page.locator("main img").count() == 0, path
        assert page.locator("main b").count() == 0, path
        cell = page.locator(".tenant", has_text="<img").first
        expect(cell).to_have_text(XSS_TENANT)
    page.goto(live.base + job_path(probe))
    expect(page.locator("pre.payload")).to_contain_text(XSS_NOTE)
    assert page.locator("pre.payload *:not(code)").count() == 0
    # The filter box shows the probe back as typed, as a value, not as markup.
    page.goto(live.base + "/jobs?" + urlencode({"tenant": XSS_TENANT}))
    expect(page.get_by_label("Tenant", exact=True)).to_have_value(XSS_TENANT)
    expect(page.locator("#jobs tbody tr")).to_have_count(1)
    # After the page has updated itself (the table is swapped in again), still only text.
    expect(page.locator("#refresh-status")).to_contain_text("Updated")
    expect(page.locator("#jobs .tenant")).to_have_text(XSS_TENANT)
    assert page.evaluate("window.__xss") is None


@pytest.mark.parametrize("width", [1280, 390])
def test_pages_fit_the_screen(live: Live, width: int) -> None:
    with chromium(width, 900) as context:
        page = as_user(context, live, "operator")
        for path in ("/", "/jobs", "/dead-letters", "/workers", job_path(live.seeded.dead[0])):
            page.goto(live.base + path)
            overflow = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, (width, path, overflow)
            expect(page.get_by_role("navigation", name="Dashboard")).to_be_visible()


#: Scrolls the window (never the table) so that the element's row is in view.
SCROLL_TO_ROW = "e => window.scrollTo(0, e.getBoundingClientRect().top + window.scrollY - 200)"


@pytest.mark.parametrize("width", [1280, 390])
def test_the_queue_table_fits_with_long_names_and_big_counts(
    db_url: str, seeded_sync: Seeded, width: int
) -> None:
    """Every queue's Pause or Resume and its last-hour chart are on screen without scrolling
    sideways, on a 1280 px screen (the table's own row) and on a phone (the row's card), with
    64-character queue names and thousands of jobs in a queue."""
    counts = run_async(seed_long_queues(db_url))
    app = make_dashboard(db_url, refresh_seconds=0)
    with serving(app) as base, chromium(width, 900) as context:
        page = as_user(context, Live(base, app, seeded_sync, db_url), "operator")
        page.goto(base + "/")
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, overflow
        table = page.locator(".table-wrap:has(#queues)")
        assert table.evaluate("e => e.scrollWidth - e.clientWidth") <= 0
        for chart in page.locator(".chart-row figure").all():
            chart.evaluate(SCROLL_TO_ROW)
            expect(chart).to_be_in_viewport(ratio=1)
        for queue in (*QUEUES, *LONG_QUEUES):
            row = page.locator(f'tr[data-queue="{queue}"]')
            row.evaluate(SCROLL_TO_ROW)
            action = row.get_by_role("link", name="Resume" if queue == LONG_QUEUES[0] else "Pause")
            expect(action).to_be_in_viewport(ratio=1)
            expect(row.locator("td.sparks")).to_be_in_viewport(ratio=1)
            expect(row.locator("th a")).to_be_in_viewport(ratio=1)
        for queue, by_state in counts.items():
            row = page.locator(f'tr[data-queue="{queue}"]')
            for state, count in by_state.items():
                expect(row.locator(f'[data-col="{state}"]')).to_have_text(str(count))


@dataclass(frozen=True)
class Export:
    parts: int


class SteppedExport:
    """A real worker in a thread of its own, on a manual clock, running one export job whose
    handler reports a part each time the test says so (and the worker's clock then moves past
    its progress interval, so that the report is written)."""

    INTERVAL = timedelta(seconds=1)

    def __init__(self, url: str, parts: int) -> None:
        self.url = url
        self.parts = parts
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.steps: asyncio.Queue[None] | None = None
        self.clock = ManualClock(END)
        self.job = JobRef(UUID(int=0), "exports", "acme", "tests.export.v1")
        self._pool = ThreadPoolExecutor(max_workers=1)
        self.ran: Future[bool] = self._pool.submit(asyncio.run, self._work())
        if not self.ready.wait(30):
            raise RuntimeError("the worker did not start")

    async def _work(self) -> bool:
        registry = JobRegistry()
        steps: asyncio.Queue[None] = asyncio.Queue()

        async def export(job: Export, ctx: JobContext[None]) -> None:
            ctx.set_meta("parts", job.parts)
            for done in range(job.parts + 1):
                ctx.progress(done, job.parts, f"part {done} of {job.parts}")
                await steps.get()

        registry.register("tests.export.v1", Export, export)
        options = WorkerOptions(progress_interval=self.INTERVAL)
        async with DatabaseQueue(self.url, registry, clock=self.clock) as queue:
            accepted = await queue.enqueue(
                Export(self.parts), DispatchOptions(queue="exports", tenant_id="acme")
            )
            self.job = JobRef(accepted.job_id, "exports", "acme", "tests.export.v1")
            self.loop, self.steps = asyncio.get_running_loop(), steps
            self.ready.set()
            async with QueueWorker(queue, options=options) as worker:
                return await worker.run_once("exports")

    def step(self) -> None:
        """Let the handler report its next part, then move the worker's clock an interval."""

        async def go() -> None:
            assert self.steps is not None
            self.steps.put_nowait(None)
            await asyncio.sleep(0)  # the handler takes the step and reports
            await self.clock.advance(self.INTERVAL)

        assert self.loop is not None
        asyncio.run_coroutine_threadsafe(go(), self.loop).result(30)

    def finish(self) -> bool:
        """Let the handler run to its end (its last report is written with its outcome,
        whatever the clock); whether the worker ran it."""
        if self.loop is not None and self.steps is not None:
            for _ in range(self.parts + 1):
                self.loop.call_soon_threadsafe(self.steps.put_nowait, None)
        try:
            return self.ran.result(30)
        finally:
            self._pool.shutdown()


def test_a_running_jobs_progress_bar_moves(live: Live, browser: BrowserContext) -> None:
    export = SteppedExport(live.url, parts=4)
    try:
        page = as_user(browser, live, "reader")
        page.goto(live.base + job_path(export.job))
        expect(page.locator("#job-state")).to_have_text("running")
        bar = page.locator("#job-progress")
        expect(bar).to_have_attribute("max", "4")
        expect(bar).to_have_attribute("value", "0")
        expect(page.locator("#job-progress-text")).to_have_text("0 of 4 (0%)")
        expect(page.locator("#job-progress-note")).to_have_text("part 0 of 4")
        expect(page.locator('#job-meta tr[data-key="parts"] td')).to_have_text("4")
        # The open page updates itself (every second here): the bar follows each report.
        for done in (1, 2):
            export.step()
            expect(bar).to_have_attribute("value", str(done), timeout=15_000)
            expect(page.locator("#job-progress-text")).to_have_text(f"{done} of 4 ({done * 25}%)")
            expect(page.locator("#job-progress-note")).to_have_text(f"part {done} of 4")
        bar_width = bar.evaluate("e => e.getBoundingClientRect().width")
        assert bar_width > 100
    finally:
        assert export.finish() is True
    expect(page.locator("#job-state")).to_have_text("completed", timeout=15_000)
    expect(page.locator("#job-progress-text")).to_have_text("4 of 4 (100%)")
    expect(page.get_by_text("Last reported:")).to_be_visible()
