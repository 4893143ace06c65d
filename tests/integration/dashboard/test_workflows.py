"""The dashboard's workflows: the listing, a workflow's page with its graph drawn on the server
(steps coloured by state, a group one node with its counts, blocked steps explained), and the
operator's actions on it, cancel and the replay of a failed step, behind the operator
permission and the anti-forgery token. No payload and no result on any page. Every store,
``memory://`` included; real requests through the ASGI app."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from caravel import DatabaseQueue, Workflow
from caravel.testing import ManualClock
from caravel.web import Dashboard
from tests.support.dashboard.fixtures import client_for, csrf_token, make_dashboard
from tests.support.dashboard.seed import END
from tests.support.dashboard.workflows import (
    BROKEN,
    FAILING,
    SECRET,
    TENANT,
    WORKFLOW_QUEUE,
    Made,
    Step,
    make_workflow,
    registry,
    run_ready,
)


@pytest.fixture
async def board(store_url: str) -> AsyncIterator[Dashboard]:
    built = make_dashboard(store_url)
    try:
        yield built
    finally:
        await built.close()


@pytest.fixture
async def made(store_url: str) -> Made:
    return await make_workflow(store_url)


async def reader_page(board: Dashboard, path: str) -> str:
    async with client_for(board, "reader") as reader:
        found = await reader.get(path)
    assert found.status_code == 200, found.text
    return found.text


def _row(page: str, marker: str) -> str:
    row = page[page.index(marker) :]
    return row[: row.index("</tr>")]


def _node(page: str, step: str) -> str:
    start = page.index(f'data-step="{step}"')
    node = page[page.rindex("<a ", 0, start) :]
    return node[: node.index("</a>")]


async def test_the_listing_shows_each_workflow_with_its_state_and_counts(
    board: Dashboard, made: Made
) -> None:
    async with client_for(board, "reader") as reader:
        listing = await reader.get("/workflows")
    assert listing.status_code == 200
    assert 'aria-current="page">Workflows<' in listing.text
    row = _row(listing.text, f'data-workflow="{made.workflow_id}"')
    assert "thumbnails" in row
    assert TENANT in row
    assert "workflow-running" in row
    # Steps, waiting (ready and held), blocked, running, completed, failed.
    assert re.findall(r'class="num[^"]*">(\d+)<', row) == ["8", "2", "1", "0", "4", "1"]
    assert SECRET not in listing.text
    async with client_for(board, "reader") as reader:
        other = await reader.get("/workflows?tenant=someone-else")
        bad = await reader.get("/workflows?tenant=" + "x" * 300)
    assert "No workflows yet." in other.text
    assert bad.status_code == 200
    assert "Tenant:" in bad.text


async def test_the_page_draws_the_graph_and_explains_what_waits(
    board: Dashboard, made: Made
) -> None:
    async with client_for(board, "reader") as reader:
        page = await reader.get(f"/workflows/{made.workflow_id}")
    assert page.status_code == 200
    text = page.text
    assert '<svg class="workflow-graph"' in text
    states = dict(re.findall(r'data-step="([^"]+)" data-state="([^"]+)"', text))
    assert states == {
        "fetch": "completed",
        "resize": "dead_letter",
        "merge": "blocked",
        "approve": "held",
        "publish": "held",
    }
    # A group is one node with its counts, never one node per member.
    assert text.count('data-step="resize"') == 2  # its node and its table row
    assert "resize \u00d74" in _node(text, "resize")
    assert "1 dead-lettered, 3 completed" in _node(text, "resize")
    merge = _row(text, 'id="step-merge"')
    assert "blocked: resize[2] was dead-lettered; replay it to resume" in merge
    approve = _row(text, 'id="step-approve"')
    assert "waits for signal &#39;approved&#39;" in approve
    publish = _row(text, 'id="step-publish"')
    assert "timer: runs no earlier than 5 min" in publish
    # Every edge of the graph, by step names.
    edges = set(re.findall(r'data-from="([^"]+)" data-to="([^"]+)"', text))
    assert edges == {
        ("fetch", "resize"),
        ("resize", "merge"),
        ("fetch", "approve"),
        ("approve", "publish"),
    }
    # A reader sees no action; no payload or result anywhere.
    assert "/replay" not in text
    assert "Cancel this workflow" not in text
    assert SECRET not in text
    resize = _row(text, 'id="step-resize"')
    assert f'href="/jobs/{made.failed}?queue={WORKFLOW_QUEUE}&amp;tenant={TENANT}"' in resize


async def test_an_operator_sees_the_actions(board: Dashboard, made: Made) -> None:
    async with client_for(board, "operator") as operator:
        page = await operator.get(f"/workflows/{made.workflow_id}")
    resize = _row(page.text, 'id="step-resize"')
    assert f"/jobs/{made.failed}/replay?queue={WORKFLOW_QUEUE}&amp;tenant={TENANT}" in resize
    assert f'href="/workflows/{made.workflow_id}/cancel"' in page.text


@pytest.mark.parametrize(
    "path", ["/workflows/nope", "/workflows/0190aaaa-0000-7000-8000-000000000000"]
)
async def test_an_unknown_or_malformed_id_is_a_404_page(board: Dashboard, path: str) -> None:
    async with client_for(board, "reader") as reader:
        found = await reader.get(path)
    assert found.status_code == 404
    assert "No such workflow" in found.text


async def test_cancel_needs_the_operator_and_the_token(board: Dashboard, made: Made) -> None:
    path = f"/workflows/{made.workflow_id}/cancel"
    async with client_for(board, "reader") as reader:
        assert (await reader.get(path)).status_code == 403
    async with client_for(board, "operator") as operator:
        confirm = await operator.get(path)
        assert confirm.status_code == 200
        assert "3 steps that have not started" in confirm.text
        refused = await operator.post(path, data={"csrf_token": "A" * 43})
        assert refused.status_code == 403
        unchanged = await board.reader.get_workflow(made.workflow_id)
        assert unchanged is not None
        assert unchanged.cancelled_at is None
        token = await csrf_token(operator, path)
        done = await operator.post(path, data={"csrf_token": token})
        assert done.status_code == 303
        assert done.headers["location"] == f"/workflows/{made.workflow_id}?cancelled=3"
        after = await operator.get(done.headers["location"])
        assert "Cancelled 3 steps" in after.text
        again = await operator.post(path, data={"csrf_token": token})
        assert again.status_code == 409
    status = await board.reader.get_workflow(made.workflow_id)
    assert status is not None
    assert status.cancelled_at is not None
    assert status.counts["cancelled"] == 3
    assert status.counts["completed"] == 4


async def test_replaying_the_failed_step_resumes_the_workflow(
    board: Dashboard, made: Made, store_url: str
) -> None:
    FAILING.discard(BROKEN)
    try:
        async with client_for(board, "operator") as operator:
            replay = f"/jobs/{made.failed}/replay"
            token = await csrf_token(operator, f"{replay}?queue={WORKFLOW_QUEUE}&tenant={TENANT}")
            done = await operator.post(
                replay, data={"csrf_token": token, "queue": WORKFLOW_QUEUE, "tenant": TENANT}
            )
            assert done.status_code == 303
            job_page = (await operator.get(done.headers["location"])).text
            assert await run_ready(store_url) == 2  # resize[2], then merge
            page = await operator.get(f"/workflows/{made.workflow_id}")
    finally:
        FAILING.add(BROKEN)
    states = dict(re.findall(r'data-step="([^"]+)" data-state="([^"]+)"', page.text))
    # The replayed job's page, where the replay lands, links its workflow back.
    assert f'href="/workflows/{made.workflow_id}"' in job_page
    assert states["resize"] == "completed"
    assert states["merge"] == "completed"
    assert "blocked:" not in page.text


async def test_a_ten_thousand_member_group_is_one_node(board: Dashboard, store_url: str) -> None:
    workflow = Workflow("wide")
    workflow.add("start", Step(1))
    workflow.add_many("fan", [Step(n) for n in range(10_000)], after=["start"])
    workflow.add("join", Step(2), after=["fan"])
    async with DatabaseQueue(store_url, registry, clock=ManualClock(END)) as queue:
        made = await queue.enqueue_workflow(workflow)
    async with client_for(board, "reader") as reader:
        page = await reader.get(f"/workflows/{made.workflow_id}")
    assert page.status_code == 200
    assert page.text.count('class="node node-') == 3
    assert "fan \u00d710,000" in _node(page.text, "fan")
    assert "10,000 waiting" in _node(page.text, "fan")
    assert "waits for start (ready)" in _row(page.text, 'id="step-fan"')
    # A held step's own page says what it waits for, and links its workflow.
    fan = made.step_ids["fan"][0]
    job = await reader_page(board, f"/jobs/{fan}?queue=default&tenant=default")
    assert "the steps it runs after in" in job
    assert f'<a href="/workflows/{made.workflow_id}">its workflow</a>' in job


async def test_the_nav_links_the_workflows(board: Dashboard) -> None:
    async with client_for(board, "reader") as reader:
        home = await reader.get("/workflows")
    assert "No workflows yet." in home.text
    assert 'href="/workflows"' in home.text
