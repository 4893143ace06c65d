"""The job page shows the pending key a job holds (escaped, as any stored text), and "none" for a
job without one, on every database."""

from __future__ import annotations

from urllib.parse import urlencode

from tests.support import Add, dispatch, open_queue
from tests.support.dashboard.fixtures import client_for, make_dashboard


async def test_the_job_page_shows_the_pending_key(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        keyed = (await queue.enqueue(Add(1), dispatch(pending_key="sync:<acct-7>"))).job_id
        plain = (await queue.enqueue(Add(2), dispatch())).job_id
    app = make_dashboard(db_url)
    try:
        where = urlencode({"queue": "default", "tenant": "tenant-a"})
        async with client_for(app, "reader") as reader:
            shown = (await reader.get(f"/jobs/{keyed}?{where}")).text
            none = (await reader.get(f"/jobs/{plain}?{where}")).text
    finally:
        await app.close()
    assert '<dt>Pending key</dt><dd><span class="mono">sync:&lt;acct-7&gt;</span></dd>' in shown
    assert "<dt>Pending key</dt><dd>none</dd>" in none
