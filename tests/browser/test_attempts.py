"""The attempt history in a real browser (Debian's Chromium through Playwright, a real uvicorn
server): a job that failed once then completed shows both attempts, newest first, and the
dead-letter list each job's last exception class and safe detail; markup in a detail stays
text. Each page is photographed, and the pictures checked: full width, of some substance.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode
from uuid import UUID

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.support.dashboard import history
from tests.support.dashboard.browser import chromium
from tests.support.dashboard.fixtures import USER_COOKIE, make_dashboard
from tests.support.dashboard.seed import END
from tests.support.dashboard.server import serving

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.usefixtures("need_chromium")]

WIDTH = 1280


@pytest.fixture
def made(db_url: str) -> history.History:
    # On a loop of its own, in another thread: Playwright's sync API keeps one running here.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(
            asyncio.run, history.run(db_url, start=END - timedelta(minutes=10))
        ).result()


@pytest.fixture
def base(db_url: str, made: history.History) -> Iterator[str]:
    with serving(make_dashboard(db_url, refresh_seconds=0)) as url:
        yield url


@pytest.fixture
def page(base: str) -> Iterator[Page]:
    with chromium(WIDTH, 800) as browser:
        yield _reader(browser, base)


def _reader(browser: BrowserContext, base: str) -> Page:
    browser.add_cookies([{"name": USER_COOKIE, "value": "reader", "url": base}])
    opened = browser.new_page()
    opened.on("dialog", lambda dialog: pytest.fail(f"a dialog opened: {dialog.message}"))
    return opened


def _job(job_id: UUID) -> str:
    return f"/jobs/{job_id}?" + urlencode({"queue": history.QUEUE, "tenant": history.TENANT})


def _photographed(page: Page, path: Path) -> None:
    """Take a full-page screenshot to ``path`` and check it: a PNG as wide as the window, taller
    than a sliver, and big enough to hold a rendered page rather than a blank one."""
    page.screenshot(path=str(path), full_page=True)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert width == WIDTH
    assert height >= 600
    assert len(data) > 40_000, f"{path.name} is {len(data)} bytes: a blank page?"


def test_the_job_page_shows_a_failure_then_the_completion(
    page: Page, base: str, made: history.History, tmp_path: Path
) -> None:
    page.goto(base + _job(made.recovered))

    timeline = page.locator("#attempt-timeline")
    expect(timeline).to_be_visible()
    rows = timeline.locator("li.attempt")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_have_attribute("data-outcome", "completed")
    expect(rows.nth(0).locator(".attempt-head")).to_contain_text("Attempt 2")
    failed = rows.nth(1)
    expect(failed).to_have_attribute("data-outcome", "failed")
    expect(failed.locator(".category")).to_have_text("HandlerFailed")
    expect(failed.locator(".error-class")).to_have_text("caravel.directives.JobFailed")
    # The detail's markup is text on the page, not an element, and it never ran.
    expect(failed.locator(".detail")).to_contain_text(f"{history.DETAIL} (attempt 1)")
    assert failed.locator(".detail script").count() == 0
    assert page.evaluate("window.__detail") is None
    expect(failed.locator("dd").filter(has_text="1.2 s")).to_be_visible()
    expect(page.get_by_text(history.SECRET)).to_have_count(0)
    box = timeline.bounding_box()
    assert box is not None
    assert box["width"] > 400  # a column of its own, not squeezed beside the summary

    _photographed(page, tmp_path / "job.png")


def test_the_dead_letter_list_shows_the_last_failure(
    page: Page, base: str, made: history.History, tmp_path: Path
) -> None:
    page.goto(base + "/dead-letters")

    expect(page.locator("#dead-letters tbody tr[data-job]")).to_have_count(1)
    row = page.locator(f'#dead-letters tr[data-job="{made.dead}"]')
    expect(row.locator(".error-class")).to_have_text("tests.support.dashboard.history.CardDeclined")
    detail = page.locator(f'#dead-letters tr[data-detail-for="{made.dead}"] .detail')
    expect(detail).to_have_text(f"{history.DETAIL} (redacted)")
    # Right under its job's row, and the table fits the window: no sideways scrolling.
    row_box, detail_box = row.bounding_box(), detail.bounding_box()
    assert row_box is not None
    assert detail_box is not None
    assert 0 <= detail_box["y"] - (row_box["y"] + row_box["height"]) < 20
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    assert page.evaluate("window.__detail") is None
    expect(page.get_by_text(history.SECRET)).to_have_count(0)

    _photographed(page, tmp_path / "dead-letters.png")

    # From the list to the job: its last two attempts, and the one record dropped.
    row.locator("td").first.locator("a").click()
    expect(page.locator("#attempt-timeline li.attempt")).to_have_count(2)
    expect(page.locator("#attempts-dropped")).to_contain_text("1 older attempt record was dropped")
