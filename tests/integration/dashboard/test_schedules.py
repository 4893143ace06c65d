"""The dashboard's schedules page: read-only, every schedule the database has state for, with
its last slot and whether it is paused; a name is escaped like any other text."""

from __future__ import annotations

import httpx

from caravel.web import Dashboard


async def test_the_page_lists_the_schedules_state(
    operator: httpx.AsyncClient, app: Dashboard
) -> None:
    empty = await operator.get("/schedules")
    assert empty.status_code == 200
    assert "No schedule has run a slot or been paused yet." in empty.text

    store = app.writer.store
    now = app.reader.clock.now_ms()
    slot = now - now % 60_000
    await store.schedule_advance("nightly-digest", slot, now)
    await app.writer.pause_schedule("heartbeat")
    page = (await operator.get("/schedules")).text
    assert 'aria-current="page">Schedules<' in page
    heartbeat = page[page.index('data-schedule="heartbeat"') :]
    heartbeat = heartbeat[: heartbeat.index("</tr>")]
    assert "paused" in heartbeat
    assert "none yet" in heartbeat
    nightly = page[page.index('data-schedule="nightly-digest"') :]
    nightly = nightly[: nightly.index("</tr>")]
    assert "running" in nightly
    assert "none yet" not in nightly
    # By name: heartbeat first.
    assert page.index('data-schedule="heartbeat"') < page.index('data-schedule="nightly-digest"')
