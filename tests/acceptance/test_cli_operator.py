"""The operator commands (``caravel status`` and ``caravel jobs ...``) as an operator runs them:
the installed console script in a subprocess, against a queue seeded in-process on a real SQLite
file and a real PostgreSQL database.

Seeding uses a :class:`~caravel.testing.ManualClock` set two days in the past, so jobs claimed
with it hold leases that the real clock (the one the command line uses) already sees as expired;
the one live lease is claimed at the real current time with an hour-long lease.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from caravel import DatabaseQueue, JobState, JobStatus, Leases, QueueInspector
from caravel.store.urls import sync_url
from caravel.testing import ManualClock
from tests.support import Add, Report, dispatch, open_queue
from tests.support.processes import CARAVEL, ROOT, run_cli, wait_until

pytestmark = pytest.mark.slow  # every test runs the console script in a subprocess

#: A distinctive string stored only inside one payload: it must never leak into listings.
CANARY = "zq-canary-payload-5e1f0b9d"

EMAILS, REPORTS = "emails", "reports"
TENANT_A, TENANT_B, TENANT_C = "tenant-a", "tenant-b", "tenant-c"
ADD_TYPE, REPORT_TYPE = "tests.add.v1", "tests.report.v1"

STATUS_FIELDS = {
    "job_id",
    "queue",
    "tenant_id",
    "job_type",
    "state",
    "attempt",
    "max_attempts",
    "due_at",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "lease_expires_at",
    "last_failure",
    "tags",
    "error_class",
    "snoozes",
    "priority",
    "result",
    "pending_key",
    "chain_id",
    "chain_step",
    "batch_id",
    "workflow_id",
    "progress",
    "meta",
    "attempts_dropped",
    "held",
    "shown_state",
}


# ----- seeding ---------------------------------------------------------------------------


@dataclass
class Seeded:
    """Job ids by label, in creation order (each job was created one second after the last)."""

    ids: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, label: str) -> str:
        return self.ids[label]

    def newest_first(self, *labels: str) -> list[str]:
        order = list(self.ids)
        return [self.ids[label] for label in sorted(labels, key=order.index, reverse=True)]


def past_clock() -> ManualClock:
    return ManualClock(datetime.now(UTC) - timedelta(days=2))


async def _enqueue(q: DatabaseQueue, job: object, **where: Any) -> str:
    result = await q.enqueue(job, dispatch(**where))
    assert not result.already_enqueued
    return str(result.job_id)


async def _dead_letter(q: DatabaseQueue, job: object, *, attempts: int = 1, **where: Any) -> str:
    """Enqueue a job and fail every one of its ``attempts`` (the queue must hold no other due
    job). With more than one attempt the clock is moved past each retry backoff."""
    clock = q.clock
    assert isinstance(clock, ManualClock)
    job_id = await _enqueue(q, job, max_attempts=attempts, **where)
    for attempt in range(1, attempts + 1):
        claimed = await Leases(q).claim(where["queue"])
        assert claimed is not None
        assert str(claimed.job_id) == job_id
        assert claimed.attempt == attempt
        outcome = await Leases(q).fail(claimed.lease, "HandlerFailed")
        assert outcome.dead_lettered is (attempt == attempts)
        if outcome.retry_at is not None:
            await clock.set(outcome.retry_at)
    return job_id


async def _seed_mix(url: str) -> Seeded:
    seeded = Seeded()
    clock = past_clock()
    tick = timedelta(seconds=1)
    async with (
        open_queue(url, clock=clock) as past,
        open_queue(
            url, lease_duration=timedelta(hours=1), clock=ManualClock(datetime.now(UTC))
        ) as live,
    ):
        # emails: one job in every state, claimed while it is the only due job of the queue.
        seeded.ids["dead"] = await _dead_letter(past, Add(1), queue=EMAILS, tenant=TENANT_A)

        await clock.advance(tick)
        completed = await _enqueue(past, Add(2), queue=EMAILS, tenant=TENANT_A)
        claimed = await Leases(past).claim(EMAILS)
        assert claimed is not None
        assert str(claimed.job_id) == completed
        await Leases(past).complete(claimed.lease)
        seeded.ids["completed"] = completed

        await clock.advance(tick)
        running = await _enqueue(past, Add(3), queue=EMAILS, tenant=TENANT_B)
        claimed = await Leases(live).claim(EMAILS)  # real time, one-hour lease: live for the test
        assert claimed is not None
        assert str(claimed.job_id) == running
        seeded.ids["running"] = running

        await clock.advance(tick)
        expired = await _enqueue(past, Add(4), queue=EMAILS, tenant=TENANT_A)
        claimed = await Leases(past).claim(EMAILS)  # 30-second lease two days ago: long expired
        assert claimed is not None
        assert str(claimed.job_id) == expired
        seeded.ids["expired"] = expired

        await clock.advance(tick)
        seeded.ids["ready1"] = await _enqueue(
            past, Report(report_id=CANARY, pages=[7]), queue=EMAILS, tenant=TENANT_A
        )
        await clock.advance(tick)
        seeded.ids["ready2"] = await _enqueue(past, Add(5), queue=EMAILS, tenant=TENANT_B)
        await clock.advance(tick)
        seeded.ids["delayed"] = await _enqueue(
            past,
            Add(6),
            queue=EMAILS,
            tenant=TENANT_A,
            not_before=datetime.now(UTC) + timedelta(days=1),
        )

        # reports: one dead letter (its attempts ran out) and one ready job.
        await clock.advance(tick)
        seeded.ids["reports_dead"] = await _dead_letter(
            past, Report(report_id="r-dead"), attempts=2, queue=REPORTS, tenant=TENANT_A
        )
        await clock.advance(tick)
        seeded.ids["reports_ready"] = await _enqueue(
            past, Report(report_id="r-ready"), queue=REPORTS, tenant=TENANT_C, priority=-42
        )
    return seeded


def seed_mix(url: str) -> Seeded:
    return asyncio.run(_seed_mix(url))


EXPECTED_COUNTS = [
    {
        "queue": EMAILS,
        "ready": 2,
        "delayed": 1,
        "held": 0,
        "running": 1,
        "expired": 1,
        "dead_letter": 1,
        "completed": 1,
        "cancelled": 0,
    },
    {
        "queue": REPORTS,
        "ready": 1,
        "delayed": 0,
        "held": 0,
        "running": 0,
        "expired": 0,
        "dead_letter": 1,
        "completed": 0,
        "cancelled": 0,
    },
]


async def _seed_dead_letters(url: str) -> Seeded:
    """Dead letters in two queues and three tenants, plus a ready and a completed job."""
    seeded = Seeded()
    clock = past_clock()
    async with open_queue(url, clock=clock) as q:
        specs = [
            ("emails_a1", EMAILS, TENANT_A),
            ("emails_a2", EMAILS, TENANT_A),
            ("emails_b", EMAILS, TENANT_B),
            ("reports_a", REPORTS, TENANT_A),
        ]
        for n, (label, queue, tenant) in enumerate(specs):
            await clock.advance(timedelta(seconds=1))
            seeded.ids[label] = await _dead_letter(
                q, Add(n, note=CANARY), queue=queue, tenant=tenant
            )
        await clock.advance(timedelta(seconds=1))
        completed = await _enqueue(q, Add(90), queue=EMAILS, tenant=TENANT_A)
        claimed = await Leases(q).claim(EMAILS)
        assert claimed is not None
        assert str(claimed.job_id) == completed
        await Leases(q).complete(claimed.lease)
        seeded.ids["completed"] = completed
        await clock.advance(timedelta(seconds=1))
        seeded.ids["ready"] = await _enqueue(q, Add(91), queue=EMAILS, tenant=TENANT_A)
    return seeded


def seed_dead_letters(url: str) -> Seeded:
    return asyncio.run(_seed_dead_letters(url))


def get_status(url: str, job_id: str, queue: str, tenant: str) -> JobStatus | None:
    async def go() -> JobStatus | None:
        async with QueueInspector(url) as q:
            return await q.get_status(job_id, queue, tenant)

    return asyncio.run(go())


def get_payload(url: str, job_id: str, queue: str, tenant: str) -> str | None:
    async def go() -> str | None:
        async with QueueInspector(url) as q:
            return await q.get_payload(job_id, queue, tenant)

    return asyncio.run(go())


# ----- evidence --------------------------------------------------------------------------


def _sync_url(url: str) -> sa.URL:
    return sync_url(url)


def dump_jobs(url: str) -> list[tuple[Any, ...]]:
    """Every stored column of every job, in id order."""
    engine = sa.create_engine(_sync_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT * FROM caravel_jobs ORDER BY id")).all()
    finally:
        engine.dispose()
    return [tuple(row) for row in rows]


def states(url: str) -> dict[str, str]:
    """Job id (canonical text) -> state."""
    engine = sa.create_engine(_sync_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            result = conn.execute(
                sa.select(sa.column("id", sa.Uuid()), sa.column("state")).select_from(
                    sa.table("caravel_jobs")
                )
            )
            return {str(row.id): row.state for row in result}
    finally:
        engine.dispose()


def _is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _sqlite_path(url: str) -> Path:
    database = make_url(url).database
    assert database
    return Path(database)


def sqlite_fingerprint(url: str) -> tuple[str, str | None]:
    """sha256 of the database file, and of its write-ahead log when that holds any frames.

    A read-only connection to a WAL-mode file may leave an empty ``-wal`` (and a ``-shm`` index,
    where readers record their read marks by design); neither carries data, so an empty log
    counts as no log. Any logged write would show up as a non-empty ``-wal``.
    """
    path = _sqlite_path(url)
    wal = path.with_name(path.name + "-wal")
    logged = wal.read_bytes() if wal.exists() else b""
    return (
        hashlib.sha256(path.read_bytes()).hexdigest(),
        hashlib.sha256(logged).hexdigest() if logged else None,
    )


def _pg_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _pg_caravel_backends(url: str) -> int:
    """Connections the queue opened (its application_name) to this database, still alive."""
    with psycopg.connect(_pg_dsn(url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = 'caravel' "
            "AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _is_mariadb(url: str) -> bool:
    return make_url(url).get_backend_name() == "mariadb"


def mariadb_fingerprint(url: str) -> list[tuple[Any, ...]]:
    """The checksum of every row of every table of ``url``'s MariaDB database. (MariaDB keeps
    no per-table write counters that hold still without server-wide instrumentation, so the
    evidence there is the data itself: a write that changed nothing goes unseen.)"""
    engine = sa.create_engine(_sync_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            names = sorted(sa.inspect(conn).get_table_names())
            quoted = ", ".join(conn.dialect.identifier_preparer.quote(n) for n in names)
            return [tuple(row) for row in conn.exec_driver_sql(f"CHECKSUM TABLE {quoted} EXTENDED")]
    finally:
        engine.dispose()


def pg_write_stats(url: str) -> tuple[int, ...]:
    """Cumulative insert/update/delete counters of caravel_jobs, read after every queue
    connection has closed (a backend flushes its pending statistics when it exits)."""
    wait_until(
        lambda: _pg_caravel_backends(url) == 0, timeout=30, what="queue connections to close"
    )
    with psycopg.connect(_pg_dsn(url), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd "
            "FROM pg_stat_user_tables WHERE relname = 'caravel_jobs'"
        ).fetchone()
    assert row is not None
    return tuple(int(v) for v in row)


def cli_with_input(
    *args: str, stdin: str, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``run_cli`` with text on standard input (for the confirmation prompt)."""
    return subprocess.run(
        [CARAVEL, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, (
        f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    )
    assert "Traceback" not in done.stderr
    return done


def failed(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """A runtime failure (exit 1): the lookup found nothing, the database failed."""
    assert done.returncode == 1, (
        f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    )
    assert "Traceback" not in done.stderr
    return done


def refused(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """A usage or configuration error (exit 2): one line on stderr, nothing on stdout."""
    assert done.returncode == 2, (
        f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    )
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stdout == ""
    return done


def flat(text: str) -> str:
    """Text with the console's line wrapping undone."""
    return " ".join(text.split())


def listed(url: str, *args: str) -> list[dict[str, Any]]:
    done = ok(run_cli("jobs", "list", "--url", url, "--json", *args))
    assert CANARY not in done.stdout
    rows: list[dict[str, Any]] = json.loads(done.stdout)["jobs"]
    return rows


@pytest.fixture
def mix(db_url: str) -> Seeded:
    return seed_mix(db_url)


# ----- caravel status --------------------------------------------------------------------


def counts_only(text: str) -> dict[str, list[dict[str, Any]]]:
    """``caravel status --json`` without the oldest-ready timestamps (checked separately) and
    the limits (none here: ``test_cli_queues`` sets some)."""
    queues = json.loads(text)["queues"]
    for row in queues:
        assert row.pop("limits") is None
        oldest = row.pop("oldest_ready_due_at")
        assert oldest is None or oldest.endswith("Z")
        assert (oldest is None) == (row["ready"] == 0)
    return {"queues": queues}


def test_status_json_counts_every_state_per_queue(db_url: str, mix: Seeded) -> None:
    done = ok(run_cli("status", "--url", db_url, "--json"))
    assert counts_only(done.stdout) == {"queues": EXPECTED_COUNTS}


def test_status_queue_filter(db_url: str, mix: Seeded) -> None:
    done = ok(run_cli("status", "--url", db_url, "--json", "--queue", REPORTS))
    assert counts_only(done.stdout) == {"queues": [EXPECTED_COUNTS[1]]}

    short = ok(run_cli("status", "--url", db_url, "--json", "-q", EMAILS))
    assert counts_only(short.stdout) == {"queues": [EXPECTED_COUNTS[0]]}

    nothing = ok(run_cli("status", "--url", db_url, "--json", "--queue", "no-such-queue"))
    assert json.loads(nothing.stdout) == {"queues": []}


def test_status_rejects_an_invalid_queue_name(db_url: str, mix: Seeded) -> None:
    done = refused(run_cli("status", "--url", db_url, "--queue", "Not A Queue!"))
    assert "queue" in done.stderr
    assert done.stdout == ""


def test_status_table_names_the_queues_with_their_counts(db_url: str, mix: Seeded) -> None:
    done = ok(run_cli("status", "--url", db_url))
    assert "Queues" in done.stdout
    for header in (
        "queue",
        "ready",
        "delayed",
        "held",
        "running",
        "expired",
        "dead letter",
        "completed",
    ):
        assert header in done.stdout
    for expected in EXPECTED_COUNTS:
        (line,) = [ln for ln in done.stdout.splitlines() if f" {expected['queue']} " in ln]
        numbers = [int(n) for n in re.findall(r"\d+", line)]
        assert numbers == [
            expected[k]
            for k in (
                "ready",
                "delayed",
                "held",
                "running",
                "expired",
                "dead_letter",
                "completed",
                "cancelled",
            )
        ]


def test_status_on_an_empty_queue_says_so(db_url: str) -> None:
    assert ok(run_cli("status", "--url", db_url)).stdout.strip() == "no jobs"
    assert json.loads(ok(run_cli("status", "--url", db_url, "--json")).stdout) == {"queues": []}


def test_status_reads_the_url_from_the_environment(db_url: str, mix: Seeded) -> None:
    done = ok(run_cli("status", "--json", env={"CARAVEL_DATABASE_URL": db_url}))
    assert counts_only(done.stdout) == {"queues": EXPECTED_COUNTS}

    listed_env = ok(run_cli("jobs", "list", "--json", env={"CARAVEL_DATABASE_URL": db_url}))
    assert len(json.loads(listed_env.stdout)["jobs"]) == len(mix.ids)


def test_status_changes_nothing_in_the_database(db_url: str, mix: Seeded) -> None:
    rows_before = dump_jobs(db_url)
    if _is_sqlite(db_url):
        files_before = sqlite_fingerprint(db_url)
    elif _is_mariadb(db_url):
        tables_before = mariadb_fingerprint(db_url)
    else:
        stats_before = pg_write_stats(db_url)

    table = ok(run_cli("status", "--url", db_url))
    assert EMAILS in table.stdout
    counted = ok(run_cli("status", "--url", db_url, "--json"))
    # The expired lease is reported, not reclaimed or dead-lettered by looking at it.
    assert counts_only(counted.stdout) == {"queues": EXPECTED_COUNTS}
    # The other read commands are read-only too.
    ok(run_cli("jobs", "list", "--url", db_url, "--json"))
    ok(run_cli("jobs", "show", mix["expired"], "--url", db_url, "-q", EMAILS, "-t", TENANT_A))

    if _is_sqlite(db_url):
        assert sqlite_fingerprint(db_url) == files_before
    elif _is_mariadb(db_url):
        assert mariadb_fingerprint(db_url) == tables_before
    else:
        assert pg_write_stats(db_url) == stats_before
    assert dump_jobs(db_url) == rows_before

    # Control: the same evidence does show a write made through the command line.
    ok(run_cli("jobs", "replay", mix["dead"], "--url", db_url, "-q", EMAILS, "-t", TENANT_A))
    if _is_sqlite(db_url):
        assert sqlite_fingerprint(db_url) != files_before
    elif _is_mariadb(db_url):
        assert mariadb_fingerprint(db_url) != tables_before
    else:
        ins, upd, dele, _ = pg_write_stats(db_url)
        assert (ins, upd, dele) == (stats_before[0], stats_before[1] + 1, stats_before[2])
    assert dump_jobs(db_url) != rows_before


# ----- caravel jobs list -----------------------------------------------------------------


def test_jobs_list_is_newest_first_without_payloads(db_url: str, mix: Seeded) -> None:
    rows = listed(db_url)
    assert [r["job_id"] for r in rows] == mix.newest_first(*mix.ids)
    for row in rows:
        assert set(row) == STATUS_FIELDS - {"result"}  # listings never read results
        assert "payload" not in row

    by_id = {r["job_id"]: r for r in rows}
    assert by_id[mix["ready1"]]["job_type"] == REPORT_TYPE
    assert by_id[mix["ready1"]]["state"] == "ready"
    assert by_id[mix["running"]]["state"] == "running"
    assert by_id[mix["running"]]["tenant_id"] == TENANT_B
    assert by_id[mix["dead"]]["state"] == "dead_letter"
    assert by_id[mix["dead"]]["last_failure"] == "HandlerFailed"
    assert by_id[mix["reports_dead"]]["attempt"] == 2
    assert by_id[mix["completed"]]["state"] == "completed"
    assert by_id[mix["reports_ready"]]["priority"] == -42
    assert by_id[mix["dead"]]["priority"] == 0


def test_jobs_list_table_shows_jobs_but_never_payloads(db_url: str, mix: Seeded) -> None:
    done = ok(run_cli("jobs", "list", "--url", db_url))
    assert CANARY not in done.stdout
    assert CANARY not in done.stderr
    assert "Jobs" in done.stdout
    assert "created (UTC)" in done.stdout  # a table's times are UTC, and it says so
    for job_id in mix.ids.values():
        assert job_id in done.stdout
    (line,) = [ln for ln in done.stdout.splitlines() if mix["reports_dead"] in ln]
    assert "dead_letter" in line
    assert "2/2" in line
    assert "HandlerFailed" in line
    assert "priority" in done.stdout
    (ready,) = [ln for ln in done.stdout.splitlines() if mix["reports_ready"] in ln]
    assert " -42 " in ready


def test_jobs_list_filters(db_url: str, mix: Seeded) -> None:
    def ids(*args: str) -> list[str]:
        return [r["job_id"] for r in listed(db_url, *args)]

    assert ids("--queue", REPORTS) == mix.newest_first("reports_dead", "reports_ready")
    assert ids("--tenant", TENANT_B) == mix.newest_first("running", "ready2")
    assert ids("-t", TENANT_C) == [mix["reports_ready"]]
    assert ids("--tenant", "TENANT-B") == []  # exact, case-sensitive
    assert ids("--state", "dead_letter") == mix.newest_first("dead", "reports_dead")
    assert ids("--state", "completed") == [mix["completed"]]
    assert ids("--type", REPORT_TYPE) == mix.newest_first("ready1", "reports_dead", "reports_ready")
    assert ids("--limit", "3") == mix.newest_first(*mix.ids)[:3]
    assert ids("--limit", "1", "--state", "ready") == [mix["reports_ready"]]
    # Every filter must match.
    assert ids("--queue", EMAILS, "--tenant", TENANT_A, "--state", "ready") == [mix["ready1"]]
    assert ids("-q", EMAILS, "--type", REPORT_TYPE, "--state", "dead_letter") == []


SHOWN = ("ready", "delayed", "running", "expired", "dead_letter", "completed")


def test_jobs_list_state_is_the_status_vocabulary_judged_now(db_url: str, mix: Seeded) -> None:
    def ids(*args: str) -> list[str]:
        return [r["job_id"] for r in listed(db_url, *args)]

    # Due now is "ready"; due tomorrow is "delayed" (both are stored as ready).
    assert ids("--state", "ready") == mix.newest_first("ready1", "ready2", "reports_ready")
    assert ids("--state", "delayed") == [mix["delayed"]]
    # A live lease is "running"; a lease that ended two days ago is "expired".
    assert ids("--state", "running") == [mix["running"]]
    assert ids("--state", "expired") == [mix["expired"]]
    # A row's state is the stored one.
    (delayed,) = listed(db_url, "--state", "delayed")
    assert delayed["state"] == "ready"
    (expired,) = listed(db_url, "--state", "expired")
    assert expired["state"] == "running"
    assert datetime.fromisoformat(expired["lease_expires_at"]) < datetime.now(UTC)

    # The same six words as `caravel status`, counting the same jobs in every queue.
    counted = json.loads(ok(run_cli("status", "--url", db_url, "--json")).stdout)["queues"]
    assert {row["queue"] for row in counted} == {EMAILS, REPORTS}
    for row in counted:
        for word in SHOWN:
            assert len(ids("--queue", row["queue"], "--state", word)) == row[word], word
    every = [job_id for word in SHOWN for job_id in ids("--state", word)]
    assert sorted(every) == sorted(mix.ids.values())  # each job in exactly one state


def test_jobs_list_state_is_judged_when_the_command_runs(db_url: str) -> None:
    """A job enqueued (two days ago) to run one day later was delayed then and is ready now; one
    claimed then with a 30-second lease is expired now, though the row still says running."""

    async def seed() -> tuple[str, str]:
        then = datetime.now(UTC) - timedelta(days=2)
        clock = ManualClock(then)
        async with open_queue(db_url, clock=clock) as q:
            claimed_id = await _enqueue(q, Add(1), queue=EMAILS)
            claimed = await Leases(q).claim(EMAILS)
            assert claimed is not None
            assert str(claimed.job_id) == claimed_id
            later = await _enqueue(q, Add(2), queue=EMAILS, not_before=then + timedelta(days=1))
        async with QueueInspector(db_url, clock=clock) as seen:  # judged two days ago
            assert [str(j.job_id) for j in await seen.list_jobs(shown_state="delayed")] == [later]
            assert [str(j.job_id) for j in await seen.list_jobs(shown_state="running")] == [
                claimed_id
            ]
        return claimed_id, later

    claimed_id, later = asyncio.run(seed())
    assert [r["job_id"] for r in listed(db_url, "--state", "ready")] == [later]
    assert listed(db_url, "--state", "delayed") == []
    assert [r["job_id"] for r in listed(db_url, "--state", "expired")] == [claimed_id]
    assert listed(db_url, "--state", "running") == []


@pytest.mark.parametrize("word", ["finished", "pending", "READY", "dead-letter", ""])
def test_jobs_list_rejects_an_unknown_state(db_url: str, mix: Seeded, word: str) -> None:
    done = refused(run_cli("jobs", "list", "--url", db_url, "--state", word))
    assert flat(done.stderr) == (
        "caravel jobs list: --state: must be one of "
        "ready, delayed, held, running, expired, dead_letter, completed, cancelled"
    )


def test_jobs_list_unknown_state_under_json_is_the_error_document(db_url: str) -> None:
    done = refused(run_cli("jobs", "list", "--url", db_url, "--json", "--state", "waiting"))
    assert json.loads(done.stderr) == {
        "error": {
            "type": "ValidationError",
            "message": "caravel jobs list: --state: must be one of "
            "ready, delayed, held, running, expired, dead_letter, completed, cancelled",
            "exit_code": 2,
        }
    }


@pytest.mark.parametrize("limit", ["0", "10001"])
def test_jobs_list_rejects_an_out_of_range_limit(db_url: str, limit: str) -> None:
    done = refused(run_cli("jobs", "list", "--url", db_url, "--json", "--limit", limit))
    error = json.loads(done.stderr)["error"]
    assert error["message"] == "caravel jobs list: --limit: must be an integer from 1 to 10000"
    assert (error["type"], error["exit_code"]) == ("ValidationError", 2)


# ----- caravel jobs show -----------------------------------------------------------------


def test_jobs_show_prints_the_status_without_the_payload(db_url: str, mix: Seeded) -> None:
    job_id = mix["ready1"]
    done = ok(
        run_cli(
            "jobs", "show", "--json", job_id, "--url", db_url, "--queue", EMAILS, "-t", TENANT_A
        )
    )
    assert CANARY not in done.stdout
    shown = json.loads(done.stdout)
    assert set(shown) == STATUS_FIELDS | {"payload", "attempts"}
    assert shown["payload"] is None  # present, null without --payload
    assert shown["job_id"] == job_id
    assert shown["queue"] == EMAILS
    assert shown["tenant_id"] == TENANT_A
    assert shown["job_type"] == REPORT_TYPE
    assert shown["state"] == "ready"
    assert shown["attempt"] == 0
    assert shown["max_attempts"] == 3
    assert shown["started_at"] is None
    assert shown["last_failure"] is None
    assert shown["due_at"] == shown["created_at"]
    assert shown["created_at"].endswith("Z")
    assert shown["priority"] == 0
    where = ("--url", db_url, "-q", REPORTS, "-t", TENANT_C)
    ready = json.loads(ok(run_cli("jobs", "show", "--json", mix["reports_ready"], *where)).stdout)
    assert ready["priority"] == -42

    dead = json.loads(
        ok(
            run_cli(
                "jobs", "show", "--json", mix["dead"], "--url", db_url, "-q", EMAILS, "-t", TENANT_A
            )
        ).stdout
    )
    assert dead["state"] == "dead_letter"
    assert dead["attempt"] == 1
    assert dead["max_attempts"] == 1
    assert dead["last_failure"] == "HandlerFailed"
    assert dead["finished_at"] is not None
    assert dead["lease_expires_at"] is None

    running = json.loads(
        ok(
            run_cli(
                "jobs",
                "show",
                "--json",
                mix["running"],
                "--url",
                db_url,
                "-q",
                EMAILS,
                "-t",
                TENANT_B,
            )
        ).stdout
    )
    assert running["state"] == "running"
    assert running["attempt"] == 1
    lease_end = datetime.fromisoformat(running["lease_expires_at"].replace("Z", "+00:00"))
    assert lease_end > datetime.now(UTC)


def test_jobs_show_payload_includes_the_payload(db_url: str, mix: Seeded) -> None:
    done = ok(
        run_cli(
            "jobs",
            "show",
            "--json",
            mix["ready1"],
            "--url",
            db_url,
            "--queue",
            EMAILS,
            "--tenant",
            TENANT_A,
            "--payload",
        )
    )
    assert CANARY in done.stdout
    shown = json.loads(done.stdout)
    assert set(shown) == STATUS_FIELDS | {"payload", "attempts"}
    assert shown["payload"] == {"report_id": CANARY, "pages": [7]}
    assert shown["job_id"] == mix["ready1"]


@pytest.mark.parametrize(
    ("queue", "tenant"),
    [
        (EMAILS, "Tenant-A"),  # tenant ids match exactly, case included
        (EMAILS, "TENANT-A"),
        (EMAILS, TENANT_B),
        (REPORTS, TENANT_A),
        ("no-such-queue", TENANT_A),
    ],
)
def test_jobs_show_needs_the_exact_queue_and_tenant(
    db_url: str, mix: Seeded, queue: str, tenant: str
) -> None:
    for extra in ((), ("--payload",)):
        done = failed(
            run_cli(
                "jobs",
                "show",
                "--json",
                mix["ready1"],
                "--url",
                db_url,
                "-q",
                queue,
                "-t",
                tenant,
                *extra,
            )
        )
        assert done.stdout == ""
        assert "no such job" in done.stderr
        assert CANARY not in done.stderr


def test_jobs_show_unknown_id_exits_one(db_url: str, mix: Seeded) -> None:
    done = failed(
        run_cli("jobs", "show", str(uuid4()), "--url", db_url, "-q", EMAILS, "-t", TENANT_A)
    )
    assert done.stdout == ""
    assert "no such job" in done.stderr


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "1234", "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz"])
def test_jobs_show_malformed_id_names_job_id(db_url: str, mix: Seeded, bad_id: str) -> None:
    done = refused(run_cli("jobs", "show", bad_id, "--url", db_url, "-q", EMAILS, "-t", TENANT_A))
    assert "job_id" in done.stderr
    assert done.stdout == ""


# ----- caravel jobs replay ---------------------------------------------------------------


def test_jobs_replay_makes_a_dead_letter_ready_again(db_url: str, mix: Seeded) -> None:
    job_id = mix["reports_dead"]  # dead after using both of its attempts
    payload_before = get_payload(db_url, job_id, REPORTS, TENANT_A)
    before = {row[0]: row for row in dump_jobs(db_url)}
    started = datetime.now(UTC) - timedelta(seconds=1)

    done = ok(run_cli("jobs", "replay", job_id, "--url", db_url, "-q", REPORTS, "-t", TENANT_A))
    assert f"replayed {job_id}" in done.stdout

    status = get_status(db_url, job_id, REPORTS, TENANT_A)
    assert status is not None
    assert status.state is JobState.READY
    assert status.attempt == 0
    assert status.max_attempts == 2
    assert status.last_failure is None
    assert status.finished_at is None
    assert status.started_at is None
    assert status.lease_expires_at is None
    assert started <= status.due_at <= datetime.now(UTC)  # due now, by the real clock
    assert get_payload(db_url, job_id, REPORTS, TENANT_A) == payload_before

    after = {row[0]: row for row in dump_jobs(db_url)}
    assert after.keys() == before.keys()
    changed = [key for key in before if before[key] != after[key]]
    assert [str(UUID(str(key))) for key in changed] == [job_id]

    counts = json.loads(ok(run_cli("status", "--url", db_url, "--json", "-q", REPORTS)).stdout)
    assert counts["queues"][0]["ready"] == 2
    assert counts["queues"][0]["dead_letter"] == 0

    # A second replay finds no dead letter.
    again = failed(
        run_cli("jobs", "replay", job_id, "--url", db_url, "-q", REPORTS, "-t", TENANT_A)
    )
    assert "nothing replayed" in flat(again.stderr)


@pytest.mark.parametrize(
    ("label", "queue", "tenant"),
    [
        ("ready1", EMAILS, TENANT_A),
        ("delayed", EMAILS, TENANT_A),
        ("completed", EMAILS, TENANT_A),
        ("running", EMAILS, TENANT_B),
        ("expired", EMAILS, TENANT_A),
        ("dead", EMAILS, "Tenant-A"),  # a dead letter, but not of this tenant
        ("dead", EMAILS, TENANT_B),
        ("dead", REPORTS, TENANT_A),  # nor of this queue
        (None, EMAILS, TENANT_A),  # no such job at all
    ],
)
def test_jobs_replay_of_anything_but_this_dead_letter_changes_nothing(
    db_url: str, mix: Seeded, label: str | None, queue: str, tenant: str
) -> None:
    job_id = str(uuid4()) if label is None else mix[label]
    before = dump_jobs(db_url)
    done = failed(run_cli("jobs", "replay", job_id, "--url", db_url, "-q", queue, "-t", tenant))
    assert "nothing replayed" in flat(done.stderr)
    assert "replayed" not in done.stdout
    assert dump_jobs(db_url) == before


def test_jobs_replay_malformed_id_names_job_id(db_url: str, mix: Seeded) -> None:
    before = dump_jobs(db_url)
    done = refused(run_cli("jobs", "replay", "nope", "--url", db_url, "-q", EMAILS, "-t", TENANT_A))
    assert "job_id" in done.stderr
    assert dump_jobs(db_url) == before


# ----- caravel jobs replay-dead ----------------------------------------------------------


def _replayed_lines(stderr: str) -> list[str]:
    """The "replayed <id>" lines, in order. (With piped input the confirmation prompt has no
    line break after it, so a line may start after the prompt.)"""
    return [f"replayed {m}" for m in re.findall(r"\breplayed ([0-9a-f-]{36})$", stderr, re.M)]


def test_replay_dead_replays_matching_dead_letters_only(db_url: str) -> None:
    seeded = seed_dead_letters(db_url)
    dead = {seeded[k] for k in ("emails_a1", "emails_a2", "emails_b", "reports_a")}
    assert {k for k, v in states(db_url).items() if v == "dead_letter"} == dead

    first = ok(
        run_cli(
            "jobs", "replay-dead", "--url", db_url, "--yes", "--queue", EMAILS, "--tenant", TENANT_A
        )
    )
    want = {seeded["emails_a1"], seeded["emails_a2"]}
    assert sorted(_replayed_lines(first.stderr)) == sorted(f"replayed {i}" for i in want)
    assert "replayed 2 of 2" in first.stdout
    assert CANARY not in first.stdout + first.stderr
    now = states(db_url)
    assert {k for k, v in now.items() if v == "dead_letter"} == dead - want
    assert now[seeded["completed"]] == "completed"
    for job_id in want:
        status = get_status(db_url, job_id, EMAILS, TENANT_A)
        assert status is not None
        assert (status.state, status.attempt, status.last_failure) == (JobState.READY, 0, None)

    second = ok(run_cli("jobs", "replay-dead", "--url", db_url, "--yes", "-q", EMAILS))
    assert _replayed_lines(second.stderr) == [f"replayed {seeded['emails_b']}"]
    assert "replayed 1 of 1" in second.stdout
    assert {k for k, v in states(db_url).items() if v == "dead_letter"} == {seeded["reports_a"]}

    before = dump_jobs(db_url)
    nothing = failed(run_cli("jobs", "replay-dead", "--url", db_url, "--yes", "-q", EMAILS))
    assert "no dead letters match" in flat(nothing.stderr)
    assert dump_jobs(db_url) == before

    rest = ok(run_cli("jobs", "replay-dead", "--url", db_url, "--yes"))
    assert _replayed_lines(rest.stderr) == [f"replayed {seeded['reports_a']}"]
    assert "dead_letter" not in states(db_url).values()


def test_replay_dead_type_and_limit_filters(db_url: str) -> None:
    seeded = seed_dead_letters(db_url)
    none_of_type = failed(
        run_cli("jobs", "replay-dead", "--url", db_url, "--yes", "--type", REPORT_TYPE)
    )
    assert "no dead letters match" in flat(none_of_type.stderr)

    one = ok(
        run_cli("jobs", "replay-dead", "--url", db_url, "--yes", "--type", ADD_TYPE, "--limit", "1")
    )
    (line,) = _replayed_lines(one.stderr)
    # Newest first: the most recently created dead letter goes first.
    assert line == f"replayed {seeded['reports_a']}"
    assert "replayed 1 of 1" in one.stdout
    assert list(states(db_url).values()).count("dead_letter") == 3


def test_replay_dead_with_nothing_matching_exits_one(db_url: str, mix: Seeded) -> None:
    before = dump_jobs(db_url)
    for args in (("--tenant", TENANT_C), ("--queue", "no-such-queue"), ("-q", REPORTS, "-t", "x")):
        done = failed(run_cli("jobs", "replay-dead", "--url", db_url, "--yes", *args))
        assert "no dead letters match" in flat(done.stderr)
        assert _replayed_lines(done.stderr) == []
    assert dump_jobs(db_url) == before


def test_replay_dead_asks_first_and_no_replays_nothing(db_url: str) -> None:
    seeded = seed_dead_letters(db_url)
    before = dump_jobs(db_url)

    declined = failed(
        cli_with_input("jobs", "replay-dead", "--url", db_url, "-q", EMAILS, stdin="n\n")
    )
    assert "Replay 3 dead letters?" in flat(declined.stderr)
    assert _replayed_lines(declined.stderr) == []
    assert dump_jobs(db_url) == before

    accepted = ok(
        cli_with_input("jobs", "replay-dead", "--url", db_url, "-q", REPORTS, stdin="y\n")
    )
    assert _replayed_lines(accepted.stderr) == [f"replayed {seeded['reports_a']}"]
    assert states(db_url)[seeded["reports_a"]] == "ready"


# ----- help ------------------------------------------------------------------------------
# Help is printed before any database is opened, so these run once rather than per backend.


HELP = [
    ((), ["db", "worker", "status", "jobs", "outbox", "metrics"]),
    (("db",), ["upgrade", "downgrade", "current", "check"]),
    (("worker",), ["--url", "--app", "--queue", "--concurrency", "--shutdown-grace"]),
    (("status",), ["--url", "--queue", "--json", "CARAVEL_DATABASE_URL"]),
    (("jobs",), ["list", "show", "replay", "replay-dead"]),
    (("jobs", "list"), ["--url", "--queue", "--tenant", "--state", "--type", "--limit", "--json"]),
    (("jobs", "show"), ["--url", "--queue", "--tenant", "--payload", "JOB_ID"]),
    (("jobs", "replay"), ["--url", "--queue", "--tenant", "JOB_ID"]),
    (("jobs", "replay-dead"), ["--url", "--queue", "--tenant", "--type", "--limit", "--yes"]),
    (("outbox", "relay"), ["--url", "--app-url", "--app", "--once", "--batch-size"]),
    (("metrics",), ["--url", "--queue", "--format", "--keys", "--serve", "--bind", "--authorize"]),
]


@pytest.mark.parametrize(
    ("command", "mentions"), HELP, ids=[" ".join(("caravel", *c)) for c, _ in HELP]
)
def test_help_exits_zero_and_names_the_key_options(
    command: tuple[str, ...], mentions: list[str]
) -> None:
    done = ok(run_cli(*command, "--help", env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"}))
    for word in mentions:
        assert word.lower() in done.stdout.lower(), (
            f"{word!r} missing from caravel {' '.join(command)} --help"
        )
