"""Tags on the dashboard, on every database: the jobs list filters by an exact tag, rows and the
job page show tags as links, a bad tag is reported and not used, and a replay selection by tag
replays only the tagged dead letters (behind the operator permission and the form token)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from urllib.parse import urlencode
from uuid import UUID

import pytest

from caravel import DatabaseQueue, DispatchOptions, JobState, Leases, QueueOptions
from caravel.testing import ManualClock
from caravel.web import Dashboard
from tests.support.dashboard.fixtures import client_for, csrf_token, make_dashboard
from tests.support.dashboard.seed import END, SendEmail, registry

ROW = re.compile(r'<tr data-job="([0-9a-f-]{36})">')


class Tagged:
    """The seeded ids: live jobs by tag, and dead letters tagged or not."""

    def __init__(self) -> None:
        self.billing: list[UUID] = []
        self.other: list[UUID] = []
        self.dead_tagged: list[UUID] = []
        self.dead_plain: list[UUID] = []


@pytest.fixture
async def tagged(db_url: str) -> Tagged:
    seeded = Tagged()
    clock = ManualClock(END)
    options = QueueOptions(max_attempts=1)
    async with DatabaseQueue(db_url, registry, clock=clock, options=options) as queue:

        async def add(queue_name: str, tags: tuple[str, ...]) -> UUID:
            job = SendEmail(to="someone@example.com", template="t")
            result = await queue.enqueue(job, DispatchOptions(queue=queue_name, tags=tags))
            return result.job_id

        for _ in range(3):
            seeded.dead_tagged.append(await add("bulk", ("incident:7",)))
            seeded.dead_plain.append(await add("bulk", ()))
        for job in await Leases(queue).claim_many("bulk", 6):
            await Leases(queue).fail(job.lease, "HandlerFailed")
        for n in range(3):
            seeded.billing.append(await add("emails", ("billing", f"customer:{n}")))
            seeded.other.append(await add("emails", ("billing-eu",)))
    return seeded


@pytest.fixture
async def app(db_url: str, tagged: Tagged) -> AsyncIterator[Dashboard]:
    built = make_dashboard(db_url)
    try:
        yield built
    finally:
        await built.close()


async def test_the_jobs_list_filters_by_an_exact_tag(app: Dashboard, tagged: Tagged) -> None:
    async with client_for(app, "reader") as reader:
        page = (await reader.get("/jobs?tag=billing&per_page=200")).text
        assert set(ROW.findall(page)) == {str(i) for i in tagged.billing}
        assert 'name="tag" value="billing"' in page  # the form keeps the filter
        # Each tag links to the jobs carrying it.
        assert '<a class="tag mono" href="/jobs?tag=customer%3A1">customer:1</a>' in page
        one = (await reader.get("/jobs?" + urlencode({"tag": "customer:1"}))).text
        assert ROW.findall(one) == [str(tagged.billing[1])]
        assert ROW.findall((await reader.get("/jobs?tag=bill")).text) == []
        both = (await reader.get("/jobs?tag=incident:7&state=dead_letter&per_page=200")).text
        assert set(ROW.findall(both)) == {str(i) for i in tagged.dead_tagged}


async def test_a_bad_tag_is_reported_and_not_used(app: Dashboard, tagged: Tagged) -> None:
    async with client_for(app, "reader") as reader:
        response = await reader.get("/jobs?tag=Not%20A%20Tag&per_page=200")
        assert response.status_code == 400
        assert "Tag: must be 1 to 64 characters" in response.text
        assert "Not A Tag" not in response.text
        every = len(tagged.billing + tagged.other + tagged.dead_tagged + tagged.dead_plain)
        assert len(ROW.findall(response.text)) == every


async def test_the_job_page_shows_its_tags(app: Dashboard, tagged: Tagged) -> None:
    async with client_for(app, "reader") as reader:
        query = urlencode({"queue": "emails", "tenant": "default"})
        page = (await reader.get(f"/jobs/{tagged.billing[2]}?{query}")).text
        assert "<dt>Tags</dt>" in page
        assert ">billing</a>" in page
        assert ">customer:2</a>" in page
        untagged = await reader.get(f"/jobs/{tagged.dead_plain[0]}?queue=bulk&tenant=default")
        assert "<dt>Tags</dt><dd>none</dd>" in untagged.text


async def test_a_replay_selection_by_tag_replays_only_the_tagged_dead_letters(
    app: Dashboard, tagged: Tagged
) -> None:
    async with client_for(app, "reader") as reader:
        refused = await reader.post(
            "/dead-letters/replay", data={"tag": "incident:7", "csrf_token": "x"}
        )
        assert refused.status_code == 403
    async with client_for(app, "operator") as operator:
        path = "/dead-letters/replay?tag=incident:7"
        confirm = (await operator.get(path)).text
        assert f'<strong id="matching">{len(tagged.dead_tagged)}</strong>' in confirm
        assert 'name="tag" value="incident:7"' in confirm
        token = await csrf_token(operator, path)
        forged = await operator.post("/dead-letters/replay", data={"tag": "incident:7"})
        assert forged.status_code == 403
        response = await operator.post(
            "/dead-letters/replay", data={"tag": "incident:7", "csrf_token": token}
        )
        assert response.status_code == 303
        await app.replays.wait()
    for job_id in tagged.dead_tagged:
        status = await app.reader.get_status(job_id, "bulk", "default")
        assert status is not None
        assert status.state is JobState.READY
    for job_id in tagged.dead_plain:
        status = await app.reader.get_status(job_id, "bulk", "default")
        assert status is not None
        assert status.state is JobState.DEAD_LETTER
