"""``caravel outbox relay`` as a real process: one pass, continuous running and shutdown, a crash
between enqueueing and marking the intents dispatched, and an unreachable application
database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from caravel import DispatchOptions, Outbox, add_outbox
from caravel.store.schema import jobs
from caravel.store.urls import sync_url
from tests.support.apps.workload import Nap, registry
from tests.support.databases import (
    SqliteTemplate,
    create_mariadb_database,
    create_pg_database,
    drop_mariadb_database,
    drop_pg_database,
    sqlite_url,
)
from tests.support.processes import CARAVEL, ROOT, wait_until

pytestmark = pytest.mark.slow

APP = "tests.support.apps.workload:registry"
QUEUE = "naps"
FAST = ("--poll-interval", "0.05")

app_metadata = sa.MetaData()
reports = sa.Table(
    "reports",
    app_metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("title", sa.String(200), nullable=False),
)
Envelope = add_outbox(app_metadata)
OUTBOX = app_metadata.tables["caravel_outbox"]


@dataclass
class Databases:
    """A migrated queue database and a separate application database with the outbox."""

    queue_url: str
    app_url: str

    def _engine(self, url: str) -> sa.Engine:
        return sa.create_engine(sync_url(url), poolclass=sa.pool.NullPool)

    def stage(self, count: int, *, keys: bool = False) -> list[UUID]:
        box = Outbox(registry, Envelope)
        engine = self._engine(self.app_url)
        try:
            with Session(engine) as session:
                ids = []
                for i in range(count):
                    session.execute(reports.insert().values(title=f"report {i}"))
                    options = DispatchOptions(
                        queue=QUEUE, tenant_id="t", idempotency_key=f"k{i}" if keys else None
                    )
                    ids.append(box.stage(session, Nap(0, label=f"nap-{i}"), options).outbox_id)
                session.commit()
        finally:
            engine.dispose()
        return ids

    def envelopes(self) -> list[Any]:
        engine = self._engine(self.app_url)
        try:
            with engine.connect() as conn:
                return list(conn.execute(sa.select(OUTBOX).order_by(OUTBOX.c.id)))
        finally:
            engine.dispose()

    def update_envelope(self, envelope_id: UUID, **values: Any) -> None:
        engine = self._engine(self.app_url)
        try:
            with engine.begin() as conn:
                conn.execute(sa.update(OUTBOX).where(OUTBOX.c.id == envelope_id).values(**values))
        finally:
            engine.dispose()

    def queue_jobs(self) -> list[Any]:
        engine = self._engine(self.queue_url)
        try:
            with engine.connect() as conn:
                return list(
                    conn.execute(
                        sa.select(
                            jobs.c.id,
                            jobs.c.queue,
                            jobs.c.tenant_id,
                            jobs.c.job_type,
                            jobs.c.payload,
                        ).order_by(jobs.c.id)
                    )
                )
        finally:
            engine.dispose()

    def dispatched(self, ids: list[UUID]) -> bool:
        by_id = {row.id: row for row in self.envelopes()}
        return all(by_id[i].dispatched_at is not None for i in ids)


def make_app_database(backend: str, tmp_path: Path) -> str:
    if backend == "sqlite":
        url = sqlite_url(tmp_path / "app.db")
    elif backend == "mariadb":
        url = create_mariadb_database("app")
    else:
        url = create_pg_database("app")
    engine = sa.create_engine(sync_url(url), poolclass=sa.pool.NullPool)
    try:
        app_metadata.create_all(engine)  # stands in for the application's own migration
    finally:
        engine.dispose()
    return url


@pytest.fixture(
    params=("sqlite", "postgresql", "mariadb"),
    ids=("sqlite-queue", "postgresql-queue", "mariadb-queue"),
)
def dbs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Databases]:
    """The queue on the parametrized backend; the application database on the same backend
    but a database of its own."""
    if request.param == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        queue_url = template.copy_to(tmp_path / "queue.db")
    else:
        queue_url = request.getfixturevalue(
            "mariadb_url" if request.param == "mariadb" else "pg_url"
        )
    app_url = make_app_database(request.param, tmp_path)
    try:
        yield Databases(queue_url, app_url)
    finally:
        if request.param == "postgresql":
            drop_pg_database(app_url)
        elif request.param == "mariadb":
            drop_mariadb_database(app_url)


def environment(**extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("CARAVEL_FAILPOINT", "CARAVEL_DATABASE_URL", "CARAVEL_APP_DATABASE_URL")
    }
    env.update({"PYTHONPATH": str(ROOT), "NO_COLOR": "1", "TERM": "dumb"})
    env.update(extra)
    return env


def relay_args(dbs: Databases, *extra: str, app_url: str | None = None) -> list[str]:
    return [
        CARAVEL,
        "outbox",
        "relay",
        "--url",
        dbs.queue_url,
        "--app-url",
        app_url or dbs.app_url,
        "--app",
        APP,
        *extra,
    ]


def run_relay(
    dbs: Databases, *extra: str, app_url: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        relay_args(dbs, *extra, app_url=app_url),
        cwd=ROOT,
        env=environment(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


class RelayProcess:
    """``caravel outbox relay`` running continuously in a subprocess."""

    def __init__(self, dbs: Databases, *extra: str, **env: str) -> None:
        self.process = subprocess.Popen(
            relay_args(dbs, *FAST, *extra),
            cwd=ROOT,
            env=environment(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait(self, timeout: float = 60.0) -> tuple[int, str]:
        try:
            _, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
            raise AssertionError(f"relay did not exit within {timeout}s; stderr:\n{err}") from None
        return self.process.returncode, err

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


def test_once_dispatches_the_staged_intents_and_exits_0(dbs: Databases) -> None:
    staged = dbs.stage(3)
    staged_payloads = {row.id: row.payload for row in dbs.envelopes()}

    done = run_relay(dbs, "--once")
    assert done.returncode == 0, done.stderr
    assert "dispatched 3" in done.stderr

    queued = {row.id: row for row in dbs.queue_jobs()}
    assert sorted(queued) == sorted(staged)
    for envelope_id in staged:
        job = queued[envelope_id]
        assert (job.queue, job.tenant_id, job.job_type) == (QUEUE, "t", "tests.nap.v1")
        assert job.payload == staged_payloads[envelope_id]
    assert sorted(json.loads(job.payload)["label"] for job in queued.values()) == [
        "nap-0",
        "nap-1",
        "nap-2",
    ]
    for row in dbs.envelopes():
        assert row.dispatched_at is not None
        assert row.queue_job_id == row.id

    again = run_relay(dbs, "--once")
    assert again.returncode == 0, again.stderr
    assert "dispatched 0" in again.stderr
    assert len(dbs.queue_jobs()) == 3


def test_once_json_prints_what_the_pass_dispatched(dbs: Databases) -> None:
    dbs.stage(2)
    done = run_relay(dbs, "--once", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"dispatched": 2}
    assert "dispatched" not in done.stderr
    assert len(dbs.queue_jobs()) == 2


def test_json_without_once_is_refused_as_json(dbs: Databases) -> None:
    done = run_relay(dbs, "--json")
    assert done.returncode == 2
    assert done.stdout == ""
    assert json.loads(done.stderr)["error"] == {
        "type": "FlagError",
        "message": (
            "caravel outbox relay: --json needs --once: a running relay reports in log lines"
        ),
        "exit_code": 2,
    }


@pytest.mark.parametrize("keys", [False, True], ids=["no-keys", "keys"])
def test_relay_killed_between_enqueue_and_marking_sends_the_same_jobs_on_restart(
    dbs: Databases, keys: bool
) -> None:
    staged = dbs.stage(5, keys=keys)

    crashing = RelayProcess(dbs, CARAVEL_FAILPOINT="relay_after_enqueue")
    try:
        code, err = crashing.wait()
    finally:
        crashing.kill()
    assert code == -signal.SIGKILL, err

    # The queue already has the jobs; the outbox still calls them pending.
    assert sorted(row.id for row in dbs.queue_jobs()) == sorted(staged)
    for row in dbs.envelopes():
        assert row.dispatched_at is None
        assert row.queue_job_id is None

    done = run_relay(dbs, "--once")
    assert done.returncode == 0, done.stderr
    assert "dispatched 5" in done.stderr

    queued = dbs.queue_jobs()
    assert len(queued) == 5  # exactly one queue job per intent
    job_ids = {row.id for row in queued}
    assert job_ids == set(staged)
    envelopes = dbs.envelopes()
    assert len(envelopes) == 5
    for row in envelopes:
        assert row.dispatched_at is not None
        assert row.queue_job_id == row.id
        assert row.queue_job_id in job_ids


def test_continuous_relay_dispatches_as_intents_commit_and_exits_0_on_sigterm(
    dbs: Databases,
) -> None:
    before = dbs.stage(2)
    relay = RelayProcess(dbs)
    try:
        wait_until(lambda: dbs.dispatched(before), what="the intents staged before the start")
        later = dbs.stage(1)
        wait_until(lambda: dbs.dispatched(later), what="an intent staged while running")
        relay.process.send_signal(signal.SIGTERM)
        code, err = relay.wait()
    finally:
        relay.kill()
    assert code == 0, err
    assert "running" in err
    assert sorted(row.id for row in dbs.queue_jobs()) == sorted(before + later)


def test_undeliverable_intent_is_logged_without_its_payload_and_the_rest_go_through(
    dbs: Databases,
) -> None:
    gone, kept = dbs.stage(2)
    dbs.update_envelope(gone, job_type="tests.retired.v1")

    done = run_relay(dbs, "--once")
    assert done.returncode == 0, done.stderr
    assert "dispatched 1" in done.stderr
    assert [row.id for row in dbs.queue_jobs()] == [kept]
    stuck = {row.id: row for row in dbs.envelopes()}[gone]
    assert stuck.dispatched_at is None
    assert stuck.relay_failure == "UnknownJobType"

    warning = [line for line in done.stderr.splitlines() if "UnknownJobType" in line]
    assert len(warning) == 1, done.stderr
    assert "nap-0" not in done.stderr  # the payload never reaches the log
    assert str(gone) in warning[0], "the log line must name the envelope to repair"


@pytest.mark.parametrize(
    "app_url",
    ["postgresql://root@127.0.0.1:1/nothing", "missing-sqlite-file"],
    ids=["postgresql-port-closed", "sqlite-file-missing"],
)
def test_relay_exits_1_when_the_application_database_is_unreachable(
    app_url: str, tmp_path: Path, sqlite_template: SqliteTemplate
) -> None:
    missing = tmp_path / "missing" / "app.db"
    if app_url == "missing-sqlite-file":
        app_url = sqlite_url(missing)
    dbs = Databases(sqlite_template.copy_to(tmp_path / "queue.db"), app_url)

    relay = RelayProcess(dbs)
    try:
        code, err = relay.wait()
    finally:
        relay.kill()
    assert code == 1, err
    assert "stopped" in err
    assert "Traceback" not in err
    assert not missing.exists()  # the relay never creates the application's database
    # Said of the application's database, not the queue's, with what to check.
    said = next(line for line in err.splitlines() if "stopped" in line)
    shown = app_url if app_url.startswith("postgresql") else str(missing)
    assert f"stopped: could not open the application database at {shown}: " in said
    assert said.endswith(
        "check that the server is running and the URL's host and port are right"
        if app_url.startswith("postgresql")
        else f"the directory {missing.parent} does not exist; create it (mkdir -p "
        f"{missing.parent}) or fix the path in the URL"
    ), said
    assert dbs.queue_jobs() == []
