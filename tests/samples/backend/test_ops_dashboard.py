"""The operations dashboard mounted at /ops: operators see and replay, signed-in members are
refused, anonymous requests must sign in first. SQLite and PostgreSQL."""

from __future__ import annotations

import re
from urllib.parse import urlencode
from uuid import UUID

from caravel_samples.backend.jobs import QUEUE, CounterEvent
from caravel_samples.backend.settings import Settings

from caravel import DispatchOptions, JobState
from caravel.testing import ManualClock
from tests.samples.backend.support import add_user, drain, running

TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


async def test_only_operators_use_the_dashboard(settings: Settings) -> None:
    clock = ManualClock()
    await add_user(settings, "olga@example.com", operator=True)
    member = await add_user(settings, "mo@example.com")
    async with (
        running(settings, clock=clock) as run,
        run.browser() as olga,
        run.browser() as mo,
        run.browser() as anonymous,
    ):
        await olga.sign_in("olga@example.com")
        await mo.sign_in("mo@example.com")
        await mo.submit("k-1", 7)
        # A job that fails: a payload outside the handler's range, with one attempt.
        bad = await run.services.queue.enqueue(
            CounterEvent(quantity=5000),
            DispatchOptions(queue=QUEUE, tenant_id=member.tenant_id, max_attempts=1),
        )
        assert await drain(run.worker()) == 2

        for path in ("/ops/", "/ops/jobs", "/ops/dead-letters", "/ops/workers"):
            assert (await anonymous.client.get(path)).status_code == 401, path
            assert (await mo.client.get(path)).status_code == 403, path
            assert (await olga.client.get(path)).status_code == 200, path

        overview = (await olga.client.get("/ops/")).text
        assert 'data-count="completed">1<' in overview
        assert 'data-count="dead_letter">1<' in overview
        assert "olga@example.com" in overview

        # Replay through the dashboard's own confirmed, anti-forgery-checked form.
        owner = urlencode({"queue": QUEUE, "tenant": member.tenant_id})
        confirm = await olga.client.get(f"/ops/jobs/{bad.job_id}/replay?{owner}")
        assert confirm.status_code == 200
        found = TOKEN.search(confirm.text)
        assert found is not None
        form = {"queue": QUEUE, "tenant": member.tenant_id}
        member_try = await mo.client.post(
            f"/ops/jobs/{bad.job_id}/replay", data={**form, "csrf_token": found.group(1)}
        )
        assert member_try.status_code == 403
        forged = await olga.client.post(f"/ops/jobs/{bad.job_id}/replay", data=form)
        assert forged.status_code == 403
        done = await olga.client.post(
            f"/ops/jobs/{bad.job_id}/replay", data={**form, "csrf_token": found.group(1)}
        )
        assert done.status_code == 303
        assert done.headers["location"].startswith(f"/ops/jobs/{bad.job_id}?")
        status = await run.services.queue.get_status(UUID(str(bad.job_id)), QUEUE, member.tenant_id)
        assert status is not None
        assert status.state is JobState.READY
