"""The job page shows the job's priority, on every database."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from tests.support import Add, dispatch, open_queue
from tests.support.dashboard.fixtures import client_for, make_dashboard


async def test_the_job_page_shows_the_priority(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        urgent = (await queue.enqueue(Add(1), dispatch(priority=-37))).job_id
        plain = (await queue.enqueue(Add(2), dispatch())).job_id

    app = make_dashboard(db_url)
    try:
        where = urlencode({"queue": "default", "tenant": "tenant-a"})
        async with client_for(app, "reader") as reader:
            pages = [(await reader.get(f"/jobs/{job}?{where}")).text for job in (urgent, plain)]
    finally:
        await app.close()

    shown = [re.search(r"<dt>Priority</dt><dd>(-?\d+)</dd>", page) for page in pages]
    assert [m.group(1) if m else None for m in shown] == ["-37", "0"]
