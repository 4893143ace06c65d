"""A pruned job on the dashboard: its page still opens (the tombstone keeps its id, queue,
tenant, type and times), says it was pruned and when, and has no payload to show."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import urlencode

import httpx

from caravel import Leases, Retention
from caravel.testing import ManualClock
from tests.support import Add, dispatch, open_queue
from tests.support.dashboard.seed import END, Seeded


async def test_a_pruned_job_page_shows_the_tombstone(
    operator: httpx.AsyncClient, seeded: Seeded, db_url: str
) -> None:
    async with open_queue(db_url, clock=ManualClock(END - timedelta(days=30))) as queue:
        job = await queue.enqueue(Add(1), dispatch("pruned-key", queue="pruning"))
        claimed = await Leases(queue).claim("pruning")
        assert claimed is not None
        await Leases(queue).complete(claimed.lease)
    async with open_queue(db_url, clock=ManualClock(END)) as queue:
        pruned = await queue.prune(Retention(completed=timedelta(days=7)), queue="pruning")
        assert pruned.tombstoned == 1

    query = urlencode({"queue": "pruning", "tenant": "tenant-a"})
    page = (await operator.get(f"/jobs/{job.job_id}?{query}")).text

    assert str(job.job_id) in page
    assert "pruned" in page
    assert "<strong>Pruned</strong>" in page
    assert "the tombstone keeps settling its idempotency key" in page
    assert "moved to dead letter" not in page
    assert '<pre class="payload"' not in page


async def test_an_operator_counts_then_prunes_from_the_dashboard(
    operator: httpx.AsyncClient, seeded: Seeded, db_url: str
) -> None:
    async with open_queue(db_url, clock=ManualClock(END - timedelta(days=30))) as queue:
        for n, key in enumerate(("a", None)):
            await queue.enqueue(Add(n), dispatch(key, queue="pruning"))
            claimed = await Leases(queue).claim("pruning")
            assert claimed is not None
            await Leases(queue).complete(claimed.lease)

    page = (await operator.get("/prune?completed=7d&queue=pruning")).text
    assert "<strong>2</strong> finished jobs would be pruned (1 deleted, 1 kept as tombstones)" in (
        page
    )
    token = csrf_token_in(page)
    response = await operator.post(
        "/prune", data={"csrf_token": token, "completed": "7d", "queue": "pruning"}
    )
    assert response.status_code == 303
    done = (await operator.get(response.headers["location"])).text
    assert "Pruned 1 deleted and 1 kept as tombstones" in done
    again = (await operator.get("/prune?completed=7d&queue=pruning")).text
    assert "<strong>0</strong> finished jobs would be pruned" in again


async def test_bad_ages_are_reported_and_nothing_is_pruned(operator: httpx.AsyncClient) -> None:
    page = (await operator.get("/prune?completed=7+days&keys=0")).text
    assert "completed: must be a whole number" in page
    assert "would be pruned" not in page
    token = csrf_token_in((await operator.get("/prune?keys=30d")).text)
    response = await operator.post("/prune", data={"csrf_token": token, "keys": "0"})
    assert response.status_code == 400
    assert "keys: must be from 1 second to 100 years" in response.text


def csrf_token_in(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)
