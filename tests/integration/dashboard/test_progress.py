"""The job page's progress and metadata, on every database: a running job's bar (done of
total, its note) and its metadata as a table, kept after it completes; markup a handler put in
them is shown as text."""

from __future__ import annotations

import json
from urllib.parse import urlencode
from uuid import UUID

from markupsafe import escape

from caravel import Leases
from caravel.store.protocol import ProgressUpdate
from tests.support import Add, dispatch, open_queue
from tests.support.dashboard.fixtures import client_for, make_dashboard

MARKUP = "<img src=x onerror=alert(1)>"


async def _page(db_url: str, job_id: UUID) -> str:
    app = make_dashboard(db_url)
    try:
        where = urlencode({"queue": "default", "tenant": "tenant-a"})
        async with client_for(app, "reader") as reader:
            response = await reader.get(f"/jobs/{job_id}?{where}")
            assert response.status_code == 200
            return response.text
    finally:
        await app.close()


async def test_a_running_job_shows_its_bar_note_and_metadata(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        job_id = (await queue.enqueue(Add(1), dispatch())).job_id
        leases = Leases(queue)
        claimed = await leases.claim("default")
        assert claimed is not None
        progress = json.dumps({"done": 30, "total": 120, "note": f"pages {MARKUP}"})
        meta = json.dumps({"pages": 120, "source": {"bucket": MARKUP}})
        now = queue.clock.now_ms()
        assert await queue.store.job_set_progress(
            ProgressUpdate(claimed.lease, now, progress, meta)
        )

        running = await _page(db_url, job_id)
        await leases.complete(claimed.lease)
        completed = await _page(db_url, job_id)

    assert '<progress id="job-progress" max="120" value="30">' in running
    assert 'Running: <span id="job-progress-text">30 of 120 (25%)</span>' in running
    assert f'<p id="job-progress-note">pages {escape(MARKUP)}</p>' in running
    assert '<tr data-key="pages">' in running
    assert escape('{"bucket": "<img src=x onerror=alert(1)>"}') in running
    assert MARKUP not in running
    # Kept after completion, as last reported.
    assert 'Last reported: <span id="job-progress-text">30 of 120 (25%)</span>' in completed
    assert '<tr data-key="source">' in completed


async def test_a_job_without_a_report_says_so(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        job_id = (await queue.enqueue(Add(1), dispatch())).job_id
        waiting = await _page(db_url, job_id)
        claimed = await Leases(queue).claim("default")
        assert claimed is not None
        running = await _page(db_url, job_id)
        report = ProgressUpdate(claimed.lease, queue.clock.now_ms(), '{"done":7,"total":null}')
        assert await queue.store.job_set_progress(report)
        counted = await _page(db_url, job_id)

    assert "No progress reported." in waiting
    assert 'id="job-meta"' not in waiting
    assert "The handler has reported no progress yet." in running
    assert '<progress id="job-progress">' in counted  # no total: an indeterminate bar
    assert '<span id="job-progress-text">7 done</span>' in counted
