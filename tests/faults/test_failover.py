"""The PostgreSQL primary is SIGKILLed mid-run and its streaming standby promoted, under
producers enqueueing with idempotency keys and supervised ``caravel worker`` processes, all on
one multi-host URL (:mod:`tests.faults.replication`). Nothing is reconfigured and nothing is
restarted: the producers' queue objects stay open and retry a failed enqueue with the same key;
the workers live through the failover inside their outage window (``--outage-window``, 30 s by
default), retrying their claims, acknowledgements and renewals until the same URL reaches the
promoted standby. Their supervisor sees no exit, and each worker exits 0 when stopped at the end.

The effects live in a SQLite file, away from both servers. The checker afterwards:

* synchronous replication: the fault suite's whole checker holds (every acknowledged enqueue
  exists, every job finished, at most one effect each, no stale write);
* asynchronous replication, streaming as on a healthy link: at most one effect per job and no
  stale write hold; acknowledged jobs within the replication lag may be lost, and are counted;
* asynchronous replication with the standby made to fall behind first (it stops receiving for
  a second, as a slow or broken link would make it): the same, and every enqueue acknowledged
  before it fell behind exists; the acknowledged jobs lost (those inside the lag) are counted,
  not asserted away.

Each run prints the time from the kill to the first job completed on the promoted standby (the
``finished_at`` the promoted standby recorded for it, minus the moment the test sent SIGKILL).

Two smaller tests hold leases by hand across a failover: with synchronous replication a claim
survives (its holder completes the job on the promoted standby) and the fence refuses a holder
whose lease expired and was claimed again; with asynchronous replication a claim lost with the
primary is handed out again under the same token, and the fence still refuses the lost claim's
holder: each claim presents its own nonce besides the token.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from caravel import DatabaseQueue, LeaseLostError, Leases, QueueOptions, migrate
from caravel.errors import StoreError
from caravel.testing import ManualClock
from tests.faults.effects_app import registry
from tests.faults.harness import (
    QUEUE,
    CheckFailed,
    Client,
    Effect,
    Figures,
    Supervisor,
    check,
    create_app_database,
    job_states,
    query,
    wait_until,
)
from tests.faults.replication import ReplicatedPair, pair_for_test
from tests.support.databases import IN_CI

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.postgres]

T = TypeVar("T")

LEASE = 2.0
PRODUCERS = 2
JOBS_PER_PRODUCER = 200
PACE = 0.03  # seconds between one producer's enqueues
#: A generous bound on the time from the kill to the first job completed after it (the
#: promotion takes well under a second here; workers retry at pauses of up to 2 s).
RECOVERY_BOUND = 60.0


@pytest.fixture(params=["sync", "async", "async-behind"])
def mode(request: pytest.FixtureRequest) -> str:
    """``sync``: a synchronous standby; ``async``: an asynchronous one, streaming as it does on
    a healthy link; ``async-behind``: an asynchronous one made to fall behind before the kill."""
    return str(request.param)


@pytest.fixture
def pair(mode: str) -> Iterator[ReplicatedPair]:
    try:
        made = ReplicatedPair.create(synchronous=mode == "sync")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        message = f"cannot make a private primary and standby: {exc}"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    try:
        yield made
    finally:
        made.destroy()


@dataclass
class Acknowledged:
    key: str
    job_id: str
    at: float  # time.time() when the enqueue returned
    retried: bool  # the key had failed at least once before
    already: bool  # the retry found the job an earlier, unacknowledged try had committed


@dataclass
class Producer:
    """Enqueues ``count`` jobs, one per call, each with its own idempotency key, from a thread
    with its own event loop and one queue object kept open throughout. A failed enqueue is
    retried with the same key until it is acknowledged."""

    url: str
    name: str
    count: int
    acknowledged: list[Acknowledged] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    thread: threading.Thread | None = None

    def start(self) -> Producer:
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()
        return self

    async def _run(self) -> None:
        client = Client(self.url)
        deadline = time.monotonic() + 180
        async with client.open() as queue:
            for i in range(self.count):
                key = f"{self.name}-{i}"
                job = Effect(value=i, sleep=0.02, tag=self.name)
                failed = False
                while time.monotonic() < deadline:
                    try:
                        result = await queue.enqueue(job, client.dispatch(key))
                    except Exception as exc:
                        self.errors.append(type(exc).__name__)
                        failed = True
                        await asyncio.sleep(0.1)  # a real outage: try again shortly
                        continue
                    self.acknowledged.append(
                        Acknowledged(
                            key, str(result.job_id), time.time(), failed, result.already_enqueued
                        )
                    )
                    break
                await asyncio.sleep(PACE)  # a steady pace of real requests

    def join(self, timeout: float = 240) -> None:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"producer {self.name} did not finish"


#: What asynchronous replication may leave behind once acknowledged writes are lost: jobs (and
#: claims) the standby never received, so ledger events and effects of runs the new primary has
#: no record of, and attempt numbers handed out twice. Anything else is a broken invariant.
LOSS_SYMPTOMS = (
    "acknowledged job(s) missing",
    "effect for unknown job",
    "ledger events for unknown job",
    "started 2 times",
    "started after attempt",
    "inside its",
    "queue handed out",  # a lost claim's attempt number above the one the new primary reached
)


def completed_since(url: str, since: float) -> list[int]:
    """``finished_at`` (ms) of the jobs completed at or after ``since`` (seconds)."""
    rows = query(
        url,
        "SELECT finished_at FROM caravel_jobs WHERE state = 'completed' AND finished_at >= ?"
        " ORDER BY finished_at",
        (int(since * 1000),),
    )
    return [int(r[0]) for r in rows]


def test_the_primary_killed_and_the_standby_promoted_under_load(
    pair: ReplicatedPair, mode: str, tmp_path: Path
) -> None:
    pair.create_database("queue")
    url = pair.url("queue")
    promoted_url = pair.database_url(pair.standby, "queue")
    migrate.upgrade(url)
    app_url = create_app_database("sqlite", tmp_path)
    logs = tmp_path / "logs"
    cut_at: float | None = None
    with Supervisor(
        url, app_url, logs, workers=2, concurrency=4, lease_duration=LEASE
    ) as supervisor:
        primary_url = pair.database_url(pair.primary, "queue")
        # Producers start once both workers have registered, so the kill lands while they
        # are still enqueueing (each needs about 6 s) and they must carry on through it.
        wait_until(
            lambda: query(primary_url, "SELECT count(*) FROM caravel_workers")[0][0] >= 2,
            timeout=60,
            what="the workers to start",
        )
        producers = [Producer(url, f"p{n}", JOBS_PER_PRODUCER).start() for n in range(PRODUCERS)]
        wait_until(
            lambda: job_states(primary_url)["completed"] >= 60, timeout=60, what="work to flow"
        )
        pids = sorted(w.pid for w in supervisor.alive())
        if mode == "async-behind":
            # Everything acknowledged before cut_at reaches the standby before it stops.
            cut_at = time.time()
            pair.wait_received()
            pair.stop_receiving()
            time.sleep(1.0)  # the standby falls a second of enqueues and claims behind
        completed_before = job_states(primary_url)["completed"]
        lag = pair.behind_bytes()
        producing = sum(p.thread is not None and p.thread.is_alive() for p in producers)
        promotion = pair.fail_over()
        assert pair.killed_at is not None
        killed_at = pair.killed_at
        wait_until(
            lambda: bool(completed_since(promoted_url, killed_at)),
            timeout=RECOVERY_BOUND,
            what="a job completed on the promoted standby",
        )
        first = completed_since(promoted_url, killed_at)[0] / 1000 - killed_at
        for producer in producers:
            producer.join()
        acknowledged = [a for p in producers for a in p.acknowledged]
        present = set(job_ids(promoted_url))
        lost = [a for a in acknowledged if a.job_id not in present]
        wait_until(lambda: unfinished(promoted_url) == 0, timeout=120, what="every job to finish")
        exits = [e.returncode for e in supervisor.crashes()]
        still = sorted(w.pid for w in supervisor.alive())
    stopped = [e.returncode for e in supervisor.exits if e.at_stop]
    errors = [e for p in producers for e in p.errors]
    retried = [a for a in acknowledged if a.retried]
    print(
        f"\n[{mode}] kill -> promoted {promotion:.2f}s; kill -> first job completed on the "
        f"promoted standby {first:.2f}s; completed before the kill {completed_before}; "
        f"standby {lag} WAL bytes behind just before the kill; acknowledged "
        f"{len(acknowledged)}, lost {len(lost)}; producers enqueueing at the kill {producing}; "
        f"enqueue errors {len(errors)} "
        f"({sorted(set(errors))}), keys retried "
        f"{len(retried)} (found already committed {sum(a.already for a in retried)}); worker "
        f"exits {exits}, restarts {supervisor.restarts}, exit codes at the stop {stopped}"
    )
    assert completed_before < len(acknowledged), "the kill came after the work was done"
    # The producers were still enqueueing at the kill and went on through the failover.
    assert producing == PRODUCERS, "the producers had finished before the kill"
    assert any(a.at > killed_at for a in acknowledged)
    assert 0 <= first < RECOVERY_BOUND
    # The same worker processes throughout: none exited, none was restarted, and each stopped
    # cleanly at the end.
    assert (exits, supervisor.restarts) == ([], 0), supervisor.logs()
    assert still == pids, supervisor.logs()
    assert stopped == [0] * len(pids), supervisor.logs()
    assert "database reachable again" in supervisor.logs()
    # Retried keys never made a second job.
    assert len({a.key for a in acknowledged}) == len(acknowledged) == PRODUCERS * JOBS_PER_PRODUCER
    ids = [a.job_id for a in acknowledged]
    if pair.synchronous:
        assert lost == []
        figures = check(promoted_url, app_url, ids, logs=supervisor.logs(), lease_seconds=LEASE)
        print(f"[{mode}] figures {figures.as_dict()}")
        assert figures.completed == figures.jobs == len(ids)
        return
    if cut_at is not None:
        # Whatever was acknowledged before the standby fell behind is there; only later
        # acknowledgements can be lost.
        assert all(a.at > cut_at for a in lost), [a for a in lost if a.at <= cut_at]
    figures, symptoms = check_despite_loss(promoted_url, app_url, ids, supervisor.logs())
    print(f"[{mode}] lost {len(lost)} acknowledged job(s); figures {figures.as_dict()}")
    print(f"[{mode}] what the loss left behind: {symptoms}")


def check_despite_loss(
    url: str, app_url: str, ids: list[str], logs: str
) -> tuple[Figures, dict[str, int]]:
    """The fault suite's checker, allowing only :data:`LOSS_SYMPTOMS` (the number of problems
    the checker listed under each); at most one effect per job and no stale write must hold."""
    try:
        return check(url, app_url, ids, logs=logs, lease_seconds=LEASE), {}
    except CheckFailed as exc:
        failed = exc
    symptoms: dict[str, int] = {}
    for problem in failed.problems:
        found = next((s for s in LOSS_SYMPTOMS if s in problem), None)
        assert found is not None, f"not a symptom of lost writes: {problem}\n{failed}"
        symptoms[found] = symptoms.get(found, 0) + 1
    return failed.figures, symptoms


def job_ids(url: str) -> list[str]:
    return [str(r[0]) for r in query(url, "SELECT id FROM caravel_jobs")]


def unfinished(url: str) -> int:
    states = job_states(url)
    return sum(states.values()) - states["completed"] - states["dead_letter"]


# ----- leases held across the failover ------------------------------------------------------


@pytest.fixture
def sync_pair() -> Iterator[ReplicatedPair]:
    with pair_for_test(synchronous=True) as made:
        yield made


async def once_reconnected(call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, tried again once if it fails with a database error: the first use of a
    connection opened before the failover finds it dead (the queue then opens fresh ones)."""
    try:
        return await call()
    except StoreError:
        return await call()


async def test_leases_held_across_a_synchronous_failover_keep_their_fence(
    sync_pair: ReplicatedPair,
) -> None:
    """Claims committed on the old primary were on the standby before they returned, so on
    the promoted standby each job is still running under the same lease: its holder can
    complete it there, and once a lease has expired and the job was claimed again, the old
    holder's acknowledgement is refused. The queue object is the same throughout."""
    pair = sync_pair
    pair.create_database("queue")
    url = pair.url("queue")
    migrate.upgrade(url)
    clock = ManualClock()
    lease = timedelta(seconds=30)
    async with DatabaseQueue(
        url, registry, options=QueueOptions(lease_duration=lease), clock=clock
    ) as queue:
        client = Client(url)
        for value in (1, 2):
            await queue.enqueue(Effect(value=value), client.dispatch())
        leases = Leases(queue)
        first = await leases.claim(QUEUE)
        second = await leases.claim(QUEUE)
        assert first is not None
        assert second is not None
        pair.fail_over()

        # The first holder's lease survived the promotion: it completes the job there.
        await once_reconnected(lambda: leases.complete(first.lease))
        # The second lease expires and the job is claimed again on the promoted standby.
        await clock.advance(lease + timedelta(seconds=1))
        again = await leases.claim(QUEUE)
        assert again is not None
        assert again.lease.job_id == second.lease.job_id
        assert again.lease.token > second.lease.token
        with pytest.raises(LeaseLostError):
            await leases.complete(second.lease)  # the old holder is fenced off
        await leases.complete(again.lease)
    promoted_url = pair.database_url(pair.standby, "queue")
    rows = query(promoted_url, "SELECT id, state, attempt FROM caravel_jobs ORDER BY attempt")
    assert [(str(r[0]), r[1], r[2]) for r in rows] == [
        (str(first.lease.job_id), "completed", 1),
        (str(second.lease.job_id), "completed", 2),
    ]


@pytest.fixture
def async_pair() -> Iterator[ReplicatedPair]:
    with pair_for_test(synchronous=False) as made:
        yield made


async def test_a_claim_lost_with_an_asynchronous_primary_leaves_its_holder_fenced_off(
    async_pair: ReplicatedPair,
) -> None:
    """The standby stops receiving; a job is claimed on the primary (a claim the standby never
    gets); the primary dies and the standby is promoted, where the job is waiting again. It is
    claimed there, by the same queue object at the same millisecond of its clock, and counts to
    the same lease token; the claims' nonces still differ, so the first holder's renewal,
    failure and acknowledgement are refused, and the second holder's outcome is the one kept."""
    pair = async_pair
    pair.create_database("queue")
    url = pair.url("queue")
    migrate.upgrade(url)
    clock = ManualClock()
    async with DatabaseQueue(url, registry, clock=clock) as queue:
        await queue.enqueue(Effect(value=1), Client(url).dispatch())
        pair.wait_received()
        pair.stop_receiving()
        leases = Leases(queue)
        lost = await leases.claim(QUEUE)
        assert lost is not None
        pair.fail_over()
        again = await once_reconnected(lambda: leases.claim(QUEUE))
        assert again is not None
        assert again.lease.job_id == lost.lease.job_id
        # The shape of the gap: same job, same token, same claim time, different claims.
        assert again.lease.token == lost.lease.token
        assert again.lease.claimed_at_ms == lost.lease.claimed_at_ms
        assert again.lease.nonce != lost.lease.nonce

        assert await leases.renew(lost.lease) is None
        with pytest.raises(LeaseLostError):
            await leases.fail(lost.lease, "HandlerFailed")
        with pytest.raises(LeaseLostError):
            await leases.complete(lost.lease)
        await leases.complete(again.lease)
        with pytest.raises(LeaseLostError):
            await leases.complete(lost.lease)
    promoted_url = pair.database_url(pair.standby, "queue")
    rows = query(promoted_url, "SELECT id, state, attempt, lease_token FROM caravel_jobs")
    assert [(str(r[0]), r[1], r[2], r[3]) for r in rows] == [
        (str(again.lease.job_id), "completed", 1, again.lease.token)
    ]
