"""The dashboard's chains and batches: the batches listing and a batch's page (read-only, every
tenant, no payload), the jobs listing filtered by batch (a bad id is a 400 page naming the
field), and a job's page saying which chain step or batch member it is. A held job shows as
waiting (held), never as delayed until the year 9999."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import urlencode

import httpx

from caravel import DatabaseQueue, DispatchOptions, Leases, QueueOptions
from caravel.testing import ManualClock, drain
from caravel.web import Dashboard
from tests.support.dashboard.fixtures import client_for
from tests.support.dashboard.links import BATCHED, CHAINED, TENANT, add_links
from tests.support.dashboard.seed import END, GenerateReport, registry


def _row(page: str, marker: str) -> str:
    row = page[page.index(marker) :]
    return row[: row.index("</tr>")]


async def test_batches_list_and_batch_page(
    db_url: str, app: Dashboard, operator: httpx.AsyncClient
) -> None:
    empty = await operator.get("/batches")
    assert empty.status_code == 200
    assert "No batches yet." in empty.text
    links = await add_links(db_url)
    batch = links.batch
    assert batch.callback_id is not None

    listing = await operator.get("/batches")
    assert 'aria-current="page">Batches<' in listing.text
    row = _row(listing.text, f'data-batch="{batch.batch_id}"')
    # Total, pending, completed, failed, cancelled.
    assert re.findall(r'class="num">(\d+)<', row) == ["2", "2", "0", "0", "0"]
    assert "not yet" in row
    assert TENANT in row

    page = await operator.get(f"/batches/{batch.batch_id}")
    assert page.status_code == 200
    assert '<dd id="batch-pending">2</dd>' in page.text
    assert f'href="/jobs?batch={batch.batch_id}"' in page.text
    callback = page.text[page.text.index('id="callback-job"') :]
    assert f"/jobs/{batch.callback_id}?queue=callbacks&amp;tenant={TENANT}" in callback
    assert "waiting (held)" in page.text[page.text.index('id="callback-state"') :]
    assert "batch-done" not in page.text  # the callback's payload
    assert "ops@example.com" not in page.text

    # Both members complete: the counts move and the callback is released.
    async with DatabaseQueue(db_url, registry, clock=ManualClock(END)) as queue:
        await drain(queue, queues=[BATCHED])
    done = await operator.get(f"/batches/{batch.batch_id}")
    assert '<dd id="batch-completed">2</dd>' in done.text
    assert '<dd id="batch-pending">0</dd>' in done.text
    assert "not yet" not in done.text
    state = done.text[done.text.index('id="callback-state"') :]
    assert "badge job-ready" in state[: state.index("</dd>")]


async def test_batches_paginate_newest_first(
    db_url: str, app: Dashboard, operator: httpx.AsyncClient
) -> None:
    # Made a second apart, oldest first, all before the dashboard's now.
    made = [
        (await add_links(db_url, END - timedelta(seconds=30 - n))).batch.batch_id for n in range(21)
    ]
    first = (await operator.get("/batches?per_page=20")).text
    assert first.count("data-batch=") == 20
    assert first.index(f'data-batch="{made[-1]}"') < first.index(f'data-batch="{made[-2]}"')
    assert f'data-batch="{made[0]}"' not in first
    assert 'rel="next" href="/batches?page=2&amp;per_page=20"' in first
    second = (await operator.get("/batches?page=2&per_page=20")).text
    assert second.count("data-batch=") == 1
    assert f'data-batch="{made[0]}"' in second


async def test_unknown_or_malformed_batch_is_not_found(
    db_url: str, app: Dashboard, operator: httpx.AsyncClient
) -> None:
    for path in ("/batches/0190aaaa-0000-7000-8000-000000000000", "/batches/not-a-uuid"):
        response = await operator.get(path)
        assert response.status_code == 404
        assert "No such batch" in response.text


async def test_jobs_listing_filters_by_batch(
    db_url: str, app: Dashboard, operator: httpx.AsyncClient
) -> None:
    links = await add_links(db_url)
    other = await add_links(db_url)
    response = await operator.get(f"/jobs?batch={links.batch.batch_id}&per_page=20")
    assert response.status_code == 200
    shown = {line.split('"')[1] for line in response.text.split("data-job=")[1:]}
    assert shown == {str(job_id) for job_id in links.batch.job_ids}
    assert str(other.batch.job_ids[0]) not in response.text
    # Pages keep the filter; cancelling or deleting by filter is not offered for a batch.
    assert f'value="{links.batch.batch_id}"' in response.text
    assert "Cancel matching" not in response.text

    bad = await operator.get("/jobs?batch=nope")
    assert bad.status_code == 400
    assert "Batch: must be a UUID" in bad.text


async def test_job_page_shows_chain_and_held_state(
    db_url: str, app: Dashboard, operator: httpx.AsyncClient
) -> None:
    links = await add_links(db_url)
    first, second, third = links.chain.job_ids
    page = (await operator.get(f"/jobs/{second}?queue={CHAINED}&tenant={TENANT}")).text
    chain = page[page.index('id="job-chain"') :]
    chain = chain[: chain.index("</section>")]
    assert "step 2 of 3, running" in chain
    for other in (first, third):
        assert f"/jobs/{other}?queue={CHAINED}&amp;tenant={TENANT}" in chain
    state = page[page.index('id="job-state"') :]
    assert "waiting (held)" in state[: state.index("</dd>")]
    assert "9999" not in page
    assert "delayed" not in page[page.index('id="job-state"') : page.index('id="job-chain"')]

    listing = (await operator.get(f"/jobs?queue={CHAINED}")).text
    held_row = _row(listing, f'data-job="{third}"')
    assert "waiting (held)" in held_row
    assert "when released" in held_row
    assert "9999" not in listing
    ready_row = _row(listing, f'data-job="{first}"')
    assert "waiting (held)" not in ready_row


async def test_job_page_links_its_batch(
    db_url: str, app: Dashboard, operator: httpx.AsyncClient
) -> None:
    links = await add_links(db_url)
    member = links.batch.job_ids[0]
    page = (await operator.get(f"/jobs/{member}?queue={BATCHED}&tenant={TENANT}")).text
    batch = page[page.index('id="job-batch"') :]
    batch = batch[: batch.index("</dd>")]
    assert f'href="/batches/{links.batch.batch_id}"' in batch
    assert "2 of 2 pending" in batch
    assert 'id="job-chain"' not in page


async def test_a_reader_sees_the_pages_without_payloads(db_url: str, app: Dashboard) -> None:
    links = await add_links(db_url)
    async with client_for(app, "reader") as reader:
        for path in ("/batches", f"/batches/{links.batch.batch_id}"):
            response = await reader.get(path)
            assert response.status_code == 200
            assert "batch-0" not in response.text
            assert "ops@example.com" not in response.text


async def test_held_jobs_are_counted_as_held_not_delayed(
    db_url: str, app: Dashboard, operator: httpx.AsyncClient
) -> None:
    before = (await operator.get("/")).text
    held_before = int(re.findall(r'data-count="held">(\d+)<', before)[0])
    links = await add_links(db_url)
    page = (await operator.get("/")).text
    assert int(re.findall(r'data-count="held">(\d+)<', page)[0]) == held_before + 3
    for queue, held in ((CHAINED, "2"), ("callbacks", "1"), (BATCHED, "0")):
        row = _row(page, f'data-queue="{queue}"')
        assert re.findall(r'data-col="held">(\d+)<', row) == [held]
        assert re.findall(r'data-col="delayed">(\d+)<', row) == ["0"]
    listed = (await operator.get(f"/jobs?state=held&queue={CHAINED}")).text
    ids = set(re.findall(r"/jobs/([0-9a-f-]{36})\?", listed))
    assert ids == {str(job_id) for job_id in links.chain.job_ids[1:]}


async def test_a_job_waiting_out_its_backoff_is_delayed_on_its_page_and_in_the_listing(
    db_url: str, app: Dashboard, operator: httpx.AsyncClient
) -> None:
    backoff = timedelta(minutes=5)
    options = QueueOptions(retry_delay=backoff, max_retry_delay=backoff)
    async with DatabaseQueue(db_url, registry, clock=ManualClock(END), options=options) as queue:
        accepted = await queue.enqueue(
            GenerateReport(report_id="backoff"), DispatchOptions(queue="backoff", tenant_id=TENANT)
        )
        leases = Leases(queue)
        (claimed,) = await leases.claim_many("backoff", 1)
        assert (await leases.fail(claimed.lease, "HandlerFailed")).retry_at is not None
    query = urlencode({"queue": "backoff", "tenant": TENANT})
    page = (await operator.get(f"/jobs/{accepted.job_id}?{query}")).text
    state = page[page.index('id="job-state"') :]
    assert re.match(r'id="job-state"><span class="badge [^"]*">delayed</span>', state)
    listed = (await operator.get("/jobs?state=delayed&queue=backoff")).text
    assert str(accepted.job_id) in listed
