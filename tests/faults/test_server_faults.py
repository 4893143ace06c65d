"""Database servers failing underneath real, supervised ``caravel worker`` processes, on
PostgreSQL and MariaDB.

* (4) the server crashed and restarted under load from four workers (PostgreSQL: ``pg_ctl
  restart -m immediate``; MariaDB: ``mariadbd`` SIGKILLed and started again);
* (5) connections severed at an exact point of the conversation (mid-claim, mid-renewal,
  mid-acknowledge) by a proxy the test controls: reset, or silently stalled;
* (6) every worker session terminated (``pg_terminate_backend``, ``KILL CONNECTION``), every few
  seconds, for up to 45 s;
* (7) the queue database turned read-only mid-run, then writable again (MariaDB: the server's
  ``read_only``, which binds the workers' user, not root);
* (12) a worker on its own network host (a network namespace) whose link is cut mid-job;
* (13) the server stopped for a while: shorter than the workers' outage window, they live
  through it without exiting; longer, they exit 1 once the window is used up.

Each run ends with the fault suite's checker (:func:`tests.faults.harness.check`): every
acknowledged enqueue exists, every job is terminal, at most one effect per job, the final state
was written by the holder of the last claim, and so on. The documented contract under test: a
database failure while claiming, acknowledging or renewing stops the worker with exit code 1 and
is never recorded as a job failure; the job's lease expires and it runs again. A database that
is only unreachable (a lost or refused connection, a shutdown, read-only) stops it once its
outage window (``--outage-window``, 30 s by default) is used up: the tests that prove a bounded
exit give it a short window (:data:`NO_WINDOW`, :data:`SHORT_WINDOW`) and still see exit 1.

Every database here lives on a server of this test process's own (``pg_cluster``, see
:mod:`tests.faults.pgserver`; ``mariadb_server``, see :mod:`tests.faults.mariaserver`), never on
a shared test server: ``queue_url`` and ``server_app_url`` are its databases, and the proxies
forward to its port.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.faults.harness import (
    Client,
    Effect,
    Supervisor,
    Worker,
    all_terminal,
    check,
    create_app_database,
    enqueue_effects,
    job_rows,
    job_states,
    read_effects,
    read_ledger,
    start_worker,
    wait_until,
)
from tests.faults.mariaserver import PrivateMariadb
from tests.faults.netns import network_host, require_namespaces
from tests.faults.pgserver import PrivateCluster
from tests.faults.proxy import Action, FaultProxy, Timing, Trigger

pytestmark = [pytest.mark.slow, pytest.mark.serial]

#: The servers the tests run on, each a private one of this test process.
SERVERS = [
    pytest.param("postgresql", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]

LEASE = 2.0
RENEW = ("--lease-renewal-interval", "0.5")
#: Stop at the first failure, as before the outage window: the tests of what a stopped worker
#: leaves behind at an exact point of the conversation.
NO_WINDOW = ("--outage-window", "0")
#: A short window: the worker retries for a moment, then must still stop with exit code 1.
SHORT_WINDOW = ("--outage-window", "2")
#: The documented detection time of a dead link is about 25-35 s (keepalives after 10 s idle
#: plus 3 probes 5 s apart; tcp_user_timeout 20 s; statement_timeout 30 s). Margin on top.
DETECTION_BOUND = 90.0


Server = PrivateCluster | PrivateMariadb


@pytest.fixture
def server(backend: str, request: pytest.FixtureRequest) -> Server:
    """The private server of ``backend``, up."""
    found: Server = request.getfixturevalue(
        "mariadb_server" if backend == "mariadb" else "pg_cluster"
    )
    return found


@pytest.fixture
def queue_url(backend: str, request: pytest.FixtureRequest) -> str:
    """The migrated queue database on the private server, emptied (this module restarts the
    server and terminates sessions)."""
    if backend == "mariadb":
        return str(request.getfixturevalue("private_maria_urls")[0])
    return str(request.getfixturevalue("cluster_queue_url"))


@pytest.fixture
def server_app_url(backend: str, request: pytest.FixtureRequest) -> str:
    """The application database (effects and ledger) on the private server, emptied."""
    if backend == "mariadb":
        return str(request.getfixturevalue("private_maria_urls")[1])
    return str(request.getfixturevalue("cluster_app_url"))


def crash_restart(server: Server) -> float:
    """Crash the server and start it again; the seconds until it accepted connections."""
    if isinstance(server, PrivateMariadb):
        return server.restart(crash=True)
    return server.restart("immediate")


def nonzero_exits(supervisor: Supervisor) -> list[int]:
    """Exit codes of workers that stopped by themselves (not stopped by the supervisor)."""
    return [
        e.returncode
        for e in supervisor.exits
        if e.returncode != 0 and not getattr(e, "at_stop", False)
    ]


def assert_stopped_after_the_window(log: str) -> None:
    """The worker's log shows it met an outage, retried for its window, then stopped."""
    assert "database unavailable (" in log, log
    assert "database unavailable for " in log, log
    assert "worker stopping: StoreError" in log, log
    assert "database error during" in log, log


def failures(queue_url: str) -> dict[str, str]:
    """Jobs whose row records a failure category (job id -> category)."""
    return {r.id: r.last_failure for r in job_rows(queue_url).values() if r.last_failure}


def all_completed(queue_url: str, ids: Sequence[str]) -> bool:
    rows = job_rows(queue_url)
    return all(i in rows and rows[i].state == "completed" for i in ids)


# ----- (4) the server crashes and restarts -----------------------------------------------------


@pytest.mark.parametrize("backend", SERVERS)
def test_the_server_crashed_and_restarted_under_load_loses_nothing(
    server: Server, queue_url: str, server_app_url: str, logs: Path
) -> None:
    # Both databases live on the restarted server: a handler whose app write hits the restart
    # fails that attempt (a genuine HandlerFailed), so allow a few attempts.
    client = Client(queue_url, max_attempts=5)
    upfront = client.enqueue(Effect(value=i, sleep=0.2) for i in range(200))
    feeder = Client(queue_url, max_attempts=5)
    with (
        server.kept_running(),
        Supervisor(
            queue_url, server_app_url, logs, workers=4, concurrency=2, lease_duration=LEASE
        ) as supervisor,
    ):
        wait_until(
            lambda: job_states(queue_url)["completed"] >= 20, timeout=60, what="work to flow"
        )
        feeder.start((Effect(value=1000 + i, sleep=0.05) for i in range(60)), pause=0.05)
        completed_before = job_states(queue_url)["completed"]
        took = crash_restart(server)
        feeder.join(timeout=120)
        acknowledged = [*upfront, *feeder.acknowledged]
        wait_until(
            lambda: all_terminal(queue_url, expected=len(acknowledged)),
            timeout=120,
            what="every job to finish after the restart",
        )
        crashed = nonzero_exits(supervisor)
    print(
        f"restart took {took:.1f}s; completed before it {completed_before}; worker exits "
        f"{crashed}; restarts {supervisor.restarts}; enqueue errors {feeder.errors}"
    )
    assert completed_before < len(upfront), "the restart came after the work was done"
    # A worker that noticed the crash exited 1 for its supervisor (never another code); one
    # that did not notice carried on.
    assert set(crashed) <= {1}, supervisor.logs()
    if crashed:
        assert "database error during" in supervisor.logs()
    figures = check(
        queue_url, server_app_url, acknowledged, logs=supervisor.logs(), lease_seconds=LEASE
    )
    assert figures.dead_letter == 0, figures
    assert figures.completed == figures.jobs
    print(f"figures {figures.as_dict()}")


# ----- (5) connections severed through a proxy -------------------------------------------------

# (operation, when the connection is reset) -> jobs that must run a second claim; for an
# acknowledgement: jobs whose handler had ended that must run again (see the test).
RESETS = {
    ("claim", Timing.REQUEST): 0,  # the claim never reached the server
    ("claim", Timing.COMMIT): 1,  # a job was claimed, the worker never heard of it
    ("renew", Timing.REQUEST): 1,  # the renewal failed: the handler is cancelled
    ("renew", Timing.COMMIT): 1,  # renewed, but the worker does not know it
    # The acknowledgement ran, and its reply was lost: inside a transaction block it never
    # committed (1); as an autocommit statement it would have (0). The proxy tells which.
    ("complete", Timing.RESPONSE): 1,
    ("complete", Timing.COMMIT): 0,  # it committed, the worker cannot tell
}
OPERATION = {"claim": "job_claim", "renew": "job_renew_lease", "complete": "job_complete"}


@pytest.mark.parametrize("backend", SERVERS)
@pytest.mark.parametrize(
    ("kind", "timing"), list(RESETS), ids=[f"{k}-{t.value}" for k, t in RESETS]
)
def test_a_connection_reset_mid_operation_stops_the_worker_and_the_job_is_settled(
    queue_url: str, server_app_url: str, logs: Path, kind: str, timing: Timing
) -> None:
    sleep = 1.2 if kind == "renew" else 0.2  # long enough for a renewal at 0.5 s
    ids = enqueue_effects(queue_url, 6, sleep=sleep)
    with FaultProxy.to(queue_url) as proxy:
        trigger = proxy.arm(Trigger(kind, timing, Action.RESET))
        with Supervisor(
            proxy.url(queue_url),
            server_app_url,
            logs,
            workers=2,
            concurrency=1,
            lease_duration=LEASE,
            extra_args=(*RENEW, *NO_WINDOW),
        ) as supervisor:
            assert trigger.wait(30), f"no {kind} was seen: {dict(proxy.seen)}"
            wait_until(
                lambda: all_completed(queue_url, ids), timeout=60, what="every job to complete"
            )
            wait_until(
                lambda: bool(nonzero_exits(supervisor)), timeout=30, what="the severed worker"
            )
            crashed = nonzero_exits(supervisor)
    # Exactly the severed worker stopped, with exit code 1, naming the operation. (Its
    # replacement may or may not have been needed: the other worker can finish the rest.)
    assert crashed == [1], supervisor.logs()
    assert f"database error during {OPERATION[kind]}" in supervisor.logs()
    figures = check(queue_url, server_app_url, ids, logs=supervisor.logs(), lease_seconds=LEASE)
    assert figures.completed == 6
    assert failures(queue_url) == {}, "an infrastructure failure was recorded as a job failure"
    assert figures.rejected_acks == 0
    # Only the severed worker's claims were taken over, and only as many as the fault implies.
    (severed,) = [e.pid for e in supervisor.exits if e.returncode == 1]
    ledger = read_ledger(server_app_url)
    first_runs = {e.job_id: e.pid for e in ledger if e.event == "start" and e.attempt == 1}
    reclaimed = {r.id for r in job_rows(queue_url).values() if r.attempt > 1}
    assert all(first_runs.get(i, severed) == severed for i in reclaimed), (reclaimed, ledger)
    expected = RESETS[(kind, timing)]
    if kind != "complete":
        assert len(reclaimed) == expected, reclaimed
        return
    # Acknowledgements are posted: the worker may have claimed the next job before the write
    # failed, and that one (still running) is taken over too. What matters is the job whose
    # handler had ended: it runs again exactly when its acknowledgement did not commit.
    if timing is Timing.RESPONSE and not trigger.in_transaction:
        expected = 0  # an autocommit acknowledgement committed before its reply was lost
    ended = {e.job_id for e in ledger if e.event == "end" and e.attempt == 1 and e.pid == severed}
    assert len(reclaimed & ended) == expected, (reclaimed, ended, ledger)
    assert len(reclaimed - ended) <= 1, (reclaimed, ended, ledger)


def wait_for_exit(worker: Worker, timeout: float) -> tuple[int | None, float]:
    """Wait up to ``timeout`` for a worker to exit; return (its code or None, seconds waited)."""
    started = time.monotonic()
    try:
        code = worker.process.wait(timeout)
    except subprocess.TimeoutExpired:
        code = None
    return code, time.monotonic() - started


@pytest.mark.parametrize("backend", SERVERS)
def test_a_silently_stalled_connection_is_detected_in_bounded_time(
    queue_url: str, server_app_url: str, logs: Path
) -> None:
    """The proxy stops forwarding (both ways, every connection, new ones too) the moment the
    worker sends an acknowledgement, without closing anything: a peer that stopped answering (a
    frozen pooler or server). The worker must notice within a bounded time, exit 1, and the job
    must be settled by a fresh worker.

    TCP keepalives and ``tcp_user_timeout`` cannot see this (the proxy's kernel acknowledges
    every segment and probe) and ``statement_timeout`` cannot either (the server never receives
    the statement): only a deadline on the client side bounds it. Packet loss on the path, which
    keepalives do catch, is the ``deleted`` case of the network-namespace test below."""
    ids = enqueue_effects(queue_url, 3, sleep=0.2)
    with FaultProxy.to(queue_url) as proxy:
        trigger = proxy.arm(Trigger("complete", Timing.REQUEST, Action.BLACKHOLE, everywhere=True))
        stalled = start_worker(
            proxy.url(queue_url),
            server_app_url,
            logs / "stalled.log",
            lease_duration=LEASE,
            extra_args=SHORT_WINDOW,
        )
        try:
            assert trigger.wait(30), f"no acknowledgement was seen: {dict(proxy.seen)}"
            code, took = wait_for_exit(stalled, DETECTION_BOUND)
        finally:
            stalled.kill()
        proxy.heal()
    clean = start_worker(queue_url, server_app_url, logs / "clean.log", lease_duration=LEASE)
    try:
        wait_until(lambda: all_completed(queue_url, ids), timeout=60, what="recovery")
    finally:
        assert clean.terminate() == 0, clean.log()
    check(queue_url, server_app_url, ids, logs=[stalled.log(), clean.log()], lease_seconds=LEASE)
    assert failures(queue_url) == {}
    assert code is not None, (
        f"the worker was still running {took:.0f}s after its database connection went silent "
        f"mid-acknowledgement (no bounded detection); log:\n{stalled.log()}"
    )
    assert code == 1, stalled.log()
    assert took < DETECTION_BOUND
    assert_stopped_after_the_window(stalled.log())


@pytest.mark.parametrize("backend", SERVERS)
def test_a_renewal_that_hangs_does_not_keep_a_handler_running_past_its_lease(
    queue_url: str, server_app_url: str, logs: Path
) -> None:
    """One connection of a worker stalls while it renews a lease (the rest of its connections
    work). The job's lease runs out and a second worker takes the job over. The stalled
    worker's handler must be cancelled at its lease deadline (workers.md: "a handler still
    running when its lease expires is cancelled"), not keep running next to the takeover."""
    (job_id,) = enqueue_effects(queue_url, 1, sleep=6.0, sleep_attempts=1)
    with FaultProxy.to(queue_url) as proxy:
        trigger = proxy.arm(Trigger("renew", Timing.REQUEST, Action.BLACKHOLE))
        stalled = start_worker(
            proxy.url(queue_url),
            server_app_url,
            logs / "stalled.log",
            lease_duration=LEASE,
            extra_args=RENEW,
        )
        other = None
        try:
            assert trigger.wait(30), f"no renewal was seen: {dict(proxy.seen)}"
            other = start_worker(
                queue_url, server_app_url, logs / "other.log", lease_duration=LEASE
            )
            wait_until(lambda: all_completed(queue_url, [job_id]), timeout=30, what="takeover")
            time.sleep(6.0)  # past the end of the stalled handler's six-second sleep
        finally:
            if other is not None:
                other.terminate()
            stalled.kill()
    events = [(e.event, e.attempt, e.pid) for e in read_ledger(server_app_url)]
    row = job_rows(queue_url)[job_id]
    assert (row.state, row.attempt) == ("completed", 2)
    check(queue_url, server_app_url, [job_id], logs=[stalled.log()], lease_seconds=LEASE)
    overran = [e for e in events if e[:2] == ("end", 1)]
    assert not overran, (
        "the stalled worker's handler ran to its end (attempt 1) long after its lease "
        f"expired and another worker took over: ledger {events}"
    )


# ----- (6) sessions terminated over and over ---------------------------------------------------


@pytest.mark.parametrize("backend", SERVERS)
def test_worker_sessions_terminated_every_few_seconds_fail_no_job(
    server: Server, queue_url: str, server_app_url: str, logs: Path
) -> None:
    """Every few seconds, once the workers are back and busy, every session they hold is
    terminated (on PostgreSQL ``application_name = 'caravel'``: pooled connections and
    listeners; on MariaDB the sessions in the queue database; the handlers' own app connections
    are spared either way). The storm lasts up to 45 s, or until the work is done
    (on a fast machine). Every claim counts as an attempt, and a claim cut short by a
    termination is one: a job caught in flight by several rounds in a row uses up that many
    attempts. The budget of 10 leaves room for the storm, so a dead letter here means the
    terminations were counted some other way."""
    ids = enqueue_effects(queue_url, 300, sleep=0.3, max_attempts=10)
    rounds: list[tuple[int, int]] = []  # (sessions terminated, jobs not yet finished)
    stop = threading.Event()

    def unfinished() -> int:
        states = job_states(queue_url)
        return sum(states.values()) - states["completed"] - states["dead_letter"]

    def terminator() -> None:
        while not stop.is_set():
            back = time.monotonic() + 20
            while server.sessions(queue_url) < 2 and time.monotonic() < back:
                if stop.wait(0.1):
                    return
            if stop.wait(1.0):  # let them claim and run a little
                return
            rounds.append((server.terminate_sessions(queue_url), unfinished()))

    killer = threading.Thread(target=terminator, daemon=True)
    with Supervisor(
        queue_url, server_app_url, logs, workers=2, concurrency=3, lease_duration=LEASE
    ) as supervisor:
        wait_until(lambda: job_states(queue_url)["completed"] >= 5, timeout=60, what="work to flow")
        killer.start()
        storm_ends = time.monotonic() + 45
        while time.monotonic() < storm_ends and unfinished():
            time.sleep(0.5)  # the storm lasts until the work is done, at most 45 s
        stop.set()
        killer.join()
        wait_until(lambda: all_terminal(queue_url, expected=len(ids)), timeout=120, what="the rest")
        crashed = nonzero_exits(supervisor)
    print(
        f"rounds (terminated, unfinished) {rounds}; worker exits {len(crashed)}; "
        f"restarts {supervisor.restarts}"
    )
    effective = [r for r in rounds if r[0] > 0 and r[1] > 0]
    assert len(effective) >= 3, f"too few terminations hit working workers: {rounds}"
    assert set(crashed) <= {1}, supervisor.logs()
    figures = check(queue_url, server_app_url, ids, logs=supervisor.logs(), lease_seconds=LEASE)
    print(f"figures {figures.as_dict()}")
    assert figures.dead_letter == 0, figures
    assert figures.completed == len(ids)
    assert failures(queue_url) == {}, "a terminated session was recorded as a job failure"


# ----- (7) the database turns read-only ------------------------------------------------------


@pytest.fixture
def own_queue_url(server: Server) -> Iterator[str]:
    """A migrated queue database of its own on the private server (this test changes
    database-level settings); on MariaDB, reached as a user that read-only binds (the whole
    server turns read-only there, except for root)."""
    with server.database(migrated=True) as url:
        if isinstance(server, PrivateMariadb):
            try:
                yield server.restricted_url(url)
            finally:
                server.set_read_only(False)
            return
        try:
            yield url
        finally:
            server.set_read_only(url, False)


@pytest.mark.parametrize("backend", SERVERS)
def test_a_read_only_database_fails_no_job(
    server: Server, own_queue_url: str, server_app_url: str, logs: Path
) -> None:
    """The queue database turns read-only and the workers' sessions are terminated, so every
    session from then on is read-only (on MariaDB the server's ``read_only``, which binds the
    workers' user). Workers restarted meanwhile must stop with exit code 1 on their first write
    (never marking a job failed); once the database is writable again the supervised restarts
    finish the work."""
    url = own_queue_url
    ids = enqueue_effects(url, 80, sleep=0.2)
    with Supervisor(
        url,
        server_app_url,
        logs,
        workers=2,
        concurrency=2,
        lease_duration=LEASE,
        extra_args=SHORT_WINDOW,
    ) as sup:
        wait_until(lambda: job_states(url)["completed"] >= 10, timeout=60, what="work to flow")
        with server.read_only(url):
            entered = {w.pid for w in sup.workers_ever()}

            def newcomers_stopped() -> list[int]:
                return [e.pid for e in sup.exits if e.pid not in entered]

            time.sleep(1.0)  # commits in flight when it turned read-only land meanwhile
            frozen = job_states(url)["completed"]
            wait_until(
                lambda: len(newcomers_stopped()) >= 2,
                timeout=60,
                what="workers started on the read-only database to stop",
            )
            assert job_states(url)["completed"] == frozen, "a job completed while read-only"
            stopped = newcomers_stopped()
            newcomers = [w for w in sup.workers_ever() if w.pid in stopped]
        wait_until(lambda: all_terminal(url, expected=len(ids)), timeout=90, what="the rest")
        crashed = nonzero_exits(sup)
    print(
        f"completed when read-only {frozen}; workers started and stopped while read-only "
        f"{len(stopped)}; exits {crashed}"
    )
    assert frozen < len(ids)
    # Each worker that met the read-only database exited 1, naming the failed operation.
    assert [w.poll() for w in newcomers] == [1] * len(newcomers), sup.logs()
    for worker in newcomers:
        assert "database error during" in worker.log(), worker.log()
    assert set(crashed) == {1}, sup.logs()
    # Read-only is an outage (a demoted primary is read-only): the workers running when it
    # began retried for their window, then stopped.
    first = [w for w in sup.workers_ever() if w.pid in entered and w.poll() == 1]
    assert first, sup.logs()
    for worker in first:
        assert_stopped_after_the_window(worker.log())
    figures = check(url, server_app_url, ids, logs=sup.logs(), lease_seconds=LEASE)
    assert figures.completed == len(ids)
    assert failures(url) == {}, "the read-only database was recorded as a job failure"


# ----- (12) a worker on its own network host ---------------------------------------------------


@pytest.mark.parametrize("backend", SERVERS)
@pytest.mark.parametrize("cut", ["restored", "down", "deleted"])
def test_a_worker_whose_network_link_is_cut_mid_job_is_taken_over(
    queue_url: str, tmp_path: Path, logs: Path, cut: str, backend: str
) -> None:
    """A worker inside the namespace claims a job; its link is cut while the handler runs, so
    its acknowledgement (and whatever it sends next) is stuck in the network. Its lease expires
    and a worker on the host takes the job over.

    * ``restored``: the link comes back soon after the takeover. The stale acknowledgement
      arrives late and the fence rejects it, or the worker has already stopped on a failed
      claim (exit 1) without acknowledging: either way it changes nothing.
    * ``down``: the link stays down (every packet silently dropped); ``deleted``: the veth pair
      is removed. The cut-off worker must notice in bounded time and exit 1.

    The application database is a SQLite file both workers share through the filesystem, so
    the cut only separates the namespace from the queue. The host worker is started first and
    frozen (SIGSTOP) until the cut, so that it cannot claim the job first yet takes it over as
    soon as the lease expires."""
    require_namespaces()
    app_url = create_app_database("sqlite", tmp_path)
    with network_host() as host, FaultProxy.to(queue_url, listen_host=host.host_address) as proxy:
        local = start_worker(queue_url, app_url, logs / "local.log", lease_duration=LEASE)
        remote: Worker | None = None
        try:
            wait_until(lambda: "processing" in local.log(), timeout=60, what="the host worker")
            local.signal(signal.SIGSTOP)
            remote = hosted = Worker(
                proxy.url(queue_url),
                app_url,
                logs / "remote.log",
                lease_duration=LEASE,
                prefix=host.command(),
                extra_args=SHORT_WINDOW,
            )
            # Up: listening for wake-ups (PostgreSQL), polling with claims (MariaDB).
            ready = "listen" if backend == "postgresql" else "claim"
            wait_until(lambda: proxy.seen[ready] > 0, timeout=60, what="the remote worker")
            (job_id,) = enqueue_effects(queue_url, 1, sleep=1.0, sleep_attempts=1)
            wait_until(
                lambda: any(e.event == "start" for e in read_ledger(app_url)),
                timeout=30,
                interval=0.01,
                what="the remote worker to start the job",
            )
            if cut == "deleted":
                host.delete_link()
            else:
                host.cut()
            cut_at = time.monotonic()
            local.signal(signal.SIGCONT)
            wait_until(lambda: all_completed(queue_url, [job_id]), timeout=30, what="the takeover")
            if cut == "restored":
                host.restore()
                wait_until(
                    lambda: "acknowledgement rejected" in hosted.log() or hosted.poll() is not None,
                    timeout=60,
                    what="the late acknowledgement to be rejected, or the worker to stop",
                )
                rejected = "acknowledgement rejected" in remote.log()
                stopping = "worker stopping:" in remote.log()
                if rejected and not stopping and remote.process.poll() is None:
                    remote.process.send_signal(signal.SIGTERM)
                    code = remote.process.wait(30)
                    if "worker stopping:" in remote.log():
                        # A claim on the cut connection failed just as the signal went out:
                        # the worker was already on its way out with a database error.
                        assert code in (1, -signal.SIGTERM), remote.log()
                    else:
                        assert code == 0, remote.log()  # it carried on
                else:
                    # It stopped on a claim the cut connection failed (after its late
                    # acknowledgement was rejected, or instead of sending it).
                    assert remote.process.wait(30) == 1, remote.log()
                    assert "database error during" in remote.log()
                print(f"restored link: late acknowledgement rejected: {rejected}")
            else:
                rejected = False
                try:
                    code = remote.process.wait(DETECTION_BOUND)
                except subprocess.TimeoutExpired:
                    pytest.fail(
                        f"the cut-off worker was still running {DETECTION_BOUND}s after its "
                        f"link was cut ({cut}); log:\n{remote.log()}"
                    )
                detected = time.monotonic() - cut_at
                print(f"link {cut}: the cut-off worker exited {code} after {detected:.1f}s")
                assert code == 1, remote.log()
                assert "database error during" in remote.log()
                assert "acknowledgement rejected" not in remote.log()
        finally:
            if remote is not None:
                remote.kill()
            assert local.terminate() == 0, local.log()
    assert remote is not None
    row = job_rows(queue_url)[job_id]
    assert (row.state, row.attempt, row.last_failure) == ("completed", 2, None)
    ledger = read_ledger(app_url)
    events = [(e.event, e.attempt, e.pid) for e in ledger]
    remote_events = [e for e in events if e[2] == remote.pid]
    started, ended = ("start", 1, remote.pid), ("end", 1, remote.pid)
    # The remote handler's one-second sleep ends before the cut-off worker notices the cut, or
    # the worker stops first, abandoning the attempt before its end: when a new connection
    # fails at once (MariaDB's next claim when the link is down or gone; on PostgreSQL, the
    # listener's reconnect, a second after its feed broke, once the link is gone).
    if cut == "restored" or (backend == "postgresql" and cut == "down"):
        assert remote_events == [started, ended]
    else:
        assert remote_events in ([started, ended], [started]), remote_events
    assert [e for e in events if e[2] == local.pid] == [
        ("start", 2, local.pid),
        ("end", 2, local.pid),
    ]
    assert len(events) == 2 + len(remote_events)
    assert events[0] == ("start", 1, remote.pid)  # the takeover came after the remote attempt began
    # The remote handler's sleep usually ends before its lease does, but on a loaded machine the
    # takeover may begin first. Whichever attempt ended first wrote the effect (in the same
    # transaction as its "end"); the other found it and left it alone.
    first_end = next(e for e in ledger if e.event == "end")
    assert read_effects(app_url)[job_id]["attempt"] == first_end.attempt
    figures = check(queue_url, app_url, [job_id], logs=[remote.log(), local.log()])
    assert figures.rejected_acks == (1 if rejected else 0)


# ----- (13) the server down for a while ------------------------------------------------------


@pytest.mark.parametrize("backend", SERVERS)
def test_workers_live_through_a_server_down_for_less_than_their_outage_window(
    server: Server, queue_url: str, tmp_path: Path, logs: Path
) -> None:
    """The server stops (PostgreSQL's fast shutdown, which terminates every session; MariaDB's
    SIGTERM) while two workers run jobs, and starts again a few seconds later: inside their
    window (60 s here) the workers keep running, retry, reconnect and finish every job. Neither
    exits until it is stopped, with 0. The application database is a SQLite file, so the
    handlers' own writes are not part of the outage."""
    app_url = create_app_database("sqlite", tmp_path)
    ids = enqueue_effects(queue_url, 60, sleep=0.1)
    window = ("--outage-window", "60")
    with (
        server.kept_running(),
        Supervisor(
            queue_url,
            app_url,
            logs,
            workers=2,
            concurrency=2,
            lease_duration=LEASE,
            extra_args=(*RENEW, *window),
        ) as supervisor,
    ):
        wait_until(lambda: job_states(queue_url)["completed"] >= 10, timeout=60, what="work")
        pids = sorted(w.pid for w in supervisor.alive())
        server.stop()
        time.sleep(3.0)  # an outage of a few seconds, as a restart or a failover makes
        server.start()
        more = enqueue_effects(queue_url, 20, sleep=0.1)
        wait_until(lambda: all_completed(queue_url, [*ids, *more]), timeout=90, what="every job")
        alive = sorted(w.pid for w in supervisor.alive())
        crashed = nonzero_exits(supervisor)
    print(f"worker exits {crashed}; restarts {supervisor.restarts}")
    assert (crashed, supervisor.restarts) == ([], 0), supervisor.logs()
    assert alive == pids
    assert [e.returncode for e in supervisor.exits] == [0, 0], supervisor.logs()
    assert "database unavailable (" in supervisor.logs()
    assert "database reachable again after" in supervisor.logs()
    figures = check(queue_url, app_url, [*ids, *more], logs=supervisor.logs(), lease_seconds=LEASE)
    assert figures.completed == len(ids) + len(more)
    assert failures(queue_url) == {}, "the outage was recorded as a job failure"


@pytest.mark.parametrize("backend", SERVERS)
def test_a_server_down_for_longer_than_the_outage_window_stops_the_worker_with_1(
    server: Server, queue_url: str, tmp_path: Path, logs: Path
) -> None:
    """The server stops and stays down past the worker's window (2 s here): the worker exits 1
    once the window is used up (a bounded time: the window, plus the last try's connect), its
    log naming the outage and the next step. Once the server is back a fresh worker settles
    every job, none of them recorded as failed."""
    app_url = create_app_database("sqlite", tmp_path)
    ids = enqueue_effects(queue_url, 20, sleep=0.2)
    worker = start_worker(
        queue_url, app_url, logs / "worker.log", lease_duration=LEASE, extra_args=SHORT_WINDOW
    )
    try:
        wait_until(lambda: job_states(queue_url)["completed"] >= 3, timeout=60, what="work")
        stopping = time.monotonic()
        server.stop()
        try:
            code, _ = wait_for_exit(worker, 60.0)
            took = time.monotonic() - stopping
        finally:
            server.start()
    finally:
        worker.kill()
    print(f"the worker exited {code} {took:.1f}s after the server stopped")
    assert code == 1, worker.log()
    assert took >= 2.0, worker.log()  # not before its window was used up
    assert_stopped_after_the_window(worker.log())
    assert "restart it once the database is reachable" in worker.log()
    clean = start_worker(queue_url, app_url, logs / "clean.log", lease_duration=LEASE)
    try:
        wait_until(lambda: all_completed(queue_url, ids), timeout=60, what="recovery")
    finally:
        assert clean.terminate() == 0, clean.log()
    check(queue_url, app_url, ids, logs=[worker.log(), clean.log()], lease_seconds=LEASE)
    assert failures(queue_url) == {}
