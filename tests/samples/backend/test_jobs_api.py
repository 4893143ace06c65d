"""``GET /api/jobs``: read-only monitoring, scoped by tenant unless the caller is an operator.
SQLite and PostgreSQL."""

from __future__ import annotations

from caravel_samples.backend.settings import Settings

from tests.samples.backend.support import add_user, drain, running

FIELDS = {
    "id",
    "jobType",
    "state",
    "tenantId",
    "attempt",
    "maxAttempts",
    "dueAt",
    "createdAt",
    "startedAt",
    "finishedAt",
    "failureCategory",
}


async def test_members_see_their_own_jobs_and_operators_see_all(settings: Settings) -> None:
    alice_user = await add_user(settings, "alice@example.com")
    bob_user = await add_user(settings, "bob@example.com")
    await add_user(settings, "ops@example.com", operator=True)
    async with (
        running(settings) as run,
        run.browser() as alice,
        run.browser() as bob,
        run.browser() as ops,
    ):
        for browser, email in ((alice, "alice"), (bob, "bob"), (ops, "ops")):
            await browser.sign_in(f"{email}@example.com")
        alice_ids = [(await alice.submit(f"a-{n}", n)).json()["jobId"] for n in (1, 2)]
        bob_ids = [(await bob.submit("b-1", 5)).json()["jobId"]]
        async with run.worker() as worker:
            await worker.run_once("counter")  # one of them completes

        seen = {}
        for name, browser in (("alice", alice), ("bob", bob), ("ops", ops)):
            response = await browser.client.get("/api/jobs")
            assert response.status_code == 200
            items = response.json()["items"]
            for item in items:
                assert set(item) == FIELDS  # never a payload
                assert item["jobType"] == "samples.counter.record.v1"
            seen[name] = items

        assert sorted(j["id"] for j in seen["alice"]) == sorted(alice_ids)
        assert {j["tenantId"] for j in seen["alice"]} == {alice_user.tenant_id}
        assert [j["id"] for j in seen["bob"]] == bob_ids
        assert {j["tenantId"] for j in seen["bob"]} == {bob_user.tenant_id}
        assert sorted(j["id"] for j in seen["ops"]) == sorted(alice_ids + bob_ids)
        # Newest first.
        created = [j["createdAt"] for j in seen["ops"]]
        assert created == sorted(created, reverse=True)
        assert {j["state"] for j in seen["ops"]} == {"ready", "completed"}

        me = (await ops.client.get("/auth/me")).json()
        assert me["operator"] is True
        assert me["permissions"] == ["job.read", "job.read.all", "metrics.read"]
        assert (await alice.client.get("/auth/me")).json()["permissions"] == ["job.read"]


async def test_the_limit_is_checked(settings: Settings) -> None:
    await add_user(settings, "ops@example.com", operator=True)
    async with running(settings) as run, run.browser() as ops:
        await ops.sign_in("ops@example.com")
        for n in range(3):
            await ops.submit(f"k-{n}", n + 1)
        await drain(run.worker())
        assert len((await ops.client.get("/api/jobs", params={"limit": 2})).json()["items"]) == 2
        assert len((await ops.client.get("/api/jobs", params={"limit": 500})).json()["items"]) == 3
        for bad in ("0", "501", "-1", "many"):
            response = await ops.client.get("/api/jobs", params={"limit": bad})
            assert response.status_code == 400, bad


async def test_there_is_no_write_endpoint(settings: Settings) -> None:
    await add_user(settings, "ops@example.com", operator=True)
    async with running(settings) as run, run.browser() as ops:
        await ops.sign_in("ops@example.com")
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            response = await ops.client.request(method, "/api/jobs", headers=ops.headers())
            assert response.status_code == 405
