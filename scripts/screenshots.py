"""Screenshots of the dashboard for the docs: ``python scripts/screenshots.py``.

Seeds a SQLite queue with the tests' believable last hour
(``tests/support/dashboard/seed.py``), serves the dashboard on a loopback port with uvicorn, and
photographs each main page with Debian's Chromium through Playwright, 1280 px wide, plus the
overview on a 390 px phone screen. Then a real worker adds an attempt history
(``tests/support/dashboard/history.py``: a payment that failed once then completed, one that
is a dead letter) and the dead-letter list and the first payment's page are photographed, and
a workflow with a blocked step (``tests/support/dashboard/workflows.py``) and its page.
Writes ``docs/images/dashboard-*.png``. The clock is fixed, so the pictures change only when
the pages do.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.dashboard import history, workflows  # noqa: E402
from tests.support.dashboard.browser import chromium, chromium_missing  # noqa: E402
from tests.support.dashboard.seed import END, seed  # noqa: E402
from tests.support.dashboard.server import serving  # noqa: E402

from caravel import migrate  # noqa: E402
from caravel.testing import ManualClock  # noqa: E402
from caravel.web import Principal, dashboard  # noqa: E402

IMAGES = ROOT / "docs" / "images"


def main() -> int:
    missing = chromium_missing()
    if missing:
        print(f"screenshots: {missing}", file=sys.stderr)
        return 1
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'queue.db'}"
        migrate.upgrade(url)
        seeded = asyncio.run(seed(url, probe=False))
        app = dashboard(
            url,
            authorize=lambda request: Principal.operator("ada@example.com"),
            clock=ManualClock(END),
            refresh_seconds=0,
        )
        dead = next(ref for ref in seeded.dead if ref.category == "HandlerFailed")
        job = f"/jobs/{dead.job_id}?queue={dead.queue}&tenant={dead.tenant_id}"
        pages = {
            "dashboard-overview.png": "/",
            "dashboard-jobs.png": "/jobs?queue=emails&per_page=20",
            "dashboard-job.png": job,
            "dashboard-workers.png": "/workers",
        }
        with serving(app) as base:
            with chromium(1280, 800) as browser:
                page = browser.new_page()
                for name, path in pages.items():
                    page.goto(base + path)
                    page.screenshot(path=str(IMAGES / name), full_page=True)
                    print(f"wrote docs/images/{name}")
            # The newest dead letter, after the seeded ones, before the seed's last minute.
            made = asyncio.run(history.run(url, start=END - timedelta(seconds=210)))
            where = f"queue={history.QUEUE}&tenant={history.TENANT}"
            # A workflow with a group, a dead-lettered member, the step it blocks, a signal wait
            # and a timer (tests/support/dashboard/workflows.py).
            flow = asyncio.run(workflows.make_workflow(url))
            later = {
                "dashboard-dead-letters.png": "/dead-letters",
                "dashboard-attempts.png": f"/jobs/{made.recovered}?{where}",
                "dashboard-workflow.png": f"/workflows/{flow.workflow_id}",
            }
            with chromium(1280, 800) as browser:
                page = browser.new_page()
                for name, path in later.items():
                    page.goto(base + path)
                    page.screenshot(path=str(IMAGES / name), full_page=True)
                    print(f"wrote docs/images/{name}")
            with chromium(390, 844) as phone:
                page = phone.new_page()
                page.goto(base + "/")
                page.screenshot(path=str(IMAGES / "dashboard-narrow.png"), full_page=True)
                print("wrote docs/images/dashboard-narrow.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
