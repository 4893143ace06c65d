"""The job page's result, exception class and snoozes, on every database: the result is the
application's data, shown only to those who may see payloads."""

from __future__ import annotations

from urllib.parse import urlencode

from caravel import Leases
from caravel.worker.leases import Acknowledgement
from tests.support import Add, dispatch, open_queue
from tests.support.dashboard.fixtures import client_for, make_dashboard


async def test_the_result_only_for_those_who_may_see_payloads(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        done = (await queue.enqueue(Add(1), dispatch())).job_id
        failed = (await queue.enqueue(Add(2), dispatch(max_attempts=3))).job_id
        leases = Leases(queue)
        claimed = {job.job_id: job for job in await leases.claim_many("default", 2)}
        first, second = claimed[done], claimed[failed]
        held = await leases.record(
            [
                Acknowledgement(first.lease, result='{"invoice":"secret-total-991"}'),
                Acknowledgement(
                    second.lease, "HandlerFailed", error_class="myapp.errors.PaymentDeclined"
                ),
            ]
        )
        assert held == {done, failed}

    app = make_dashboard(db_url)
    try:
        where = urlencode({"queue": "default", "tenant": "tenant-a"})
        async with client_for(app, "operator") as op, client_for(app, "reader") as reader:
            shown = (await op.get(f"/jobs/{done}?{where}")).text
            hidden = (await reader.get(f"/jobs/{done}?{where}")).text
            failure = (await reader.get(f"/jobs/{failed}?{where}")).text
            nothing = (await op.get(f"/jobs/{failed}?{where}")).text
    finally:
        await app.close()

    assert 'aria-label="Result (JSON)"' in shown
    assert "secret-total-991" in shown
    assert "secret-total-991" not in hidden
    assert "Hidden: your account may not see job results" in hidden
    assert "myapp.errors.PaymentDeclined" in failure
    assert "No result stored" in nothing
