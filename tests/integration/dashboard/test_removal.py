"""Cancelling and deleting one job from the dashboard, as an operator: a confirmation page first,
then its form's POST; the job page says what happened, and a second try changes nothing."""

from __future__ import annotations

from urllib.parse import urlencode

import httpx

from caravel.jobs import JobState
from caravel.web import Dashboard
from tests.support.dashboard.fixtures import csrf_token
from tests.support.dashboard.seed import Seeded


async def test_an_operator_cancels_a_running_job_then_deletes_it(
    app: Dashboard, seeded: Seeded, operator: httpx.AsyncClient
) -> None:
    job = seeded.running
    assert job is not None
    owner = {"queue": job.queue, "tenant": job.tenant_id}
    page = await operator.get(f"/jobs/{job.job_id}?{urlencode(owner)}")
    assert "Cancel this job…" in page.text
    assert "Delete this job…" not in page.text
    confirm = f"/jobs/{job.job_id}/cancel?{urlencode(owner)}"
    shown = await operator.get(confirm)
    assert "It is running" in shown.text
    token = await csrf_token(operator, confirm)
    refused = await operator.post(f"/jobs/{job.job_id}/delete", data={"csrf_token": token, **owner})
    assert refused.status_code == 409  # not finished: nothing deleted

    done = await operator.post(f"/jobs/{job.job_id}/cancel", data={"csrf_token": token, **owner})

    assert done.status_code == 303
    after = await operator.get(done.headers["location"])
    assert "its worker is told and cancels the handler" in after.text
    status = await app.reader.get_status(job.job_id, job.queue, job.tenant_id)
    assert status is not None
    assert status.state is JobState.CANCELLED
    again = await operator.post(f"/jobs/{job.job_id}/cancel", data={"csrf_token": token, **owner})
    assert again.status_code == 409
    assert "Delete this job…" in after.text

    gone = await operator.post(f"/jobs/{job.job_id}/delete", data={"csrf_token": token, **owner})

    assert gone.status_code == 303
    assert gone.headers["location"].endswith(f"/jobs?queue={job.queue}")
    assert await app.reader.get_status(job.job_id, job.queue, job.tenant_id) is None
    assert (await operator.get(f"/jobs/{job.job_id}?{urlencode(owner)}")).status_code == 404
