"""The transactional outbox on real application databases (a SQLite file and throwaway
PostgreSQL and MariaDB databases): staging in the application's own session, sync and async,
and the relay that delivers committed intents to the queue."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from caravel import (
    DEFAULT_TENANT,
    DatabaseQueue,
    DispatchOptions,
    IdempotencyConflictError,
    JobState,
    OptionsError,
    StagedIntent,
    UnknownJobTypeError,
    ValidationError,
    migrate,
)
from caravel.clock import from_ms, to_ms_ceil
from caravel.outbox import Outbox, OutboxRelay, add_outbox
from caravel.store.protocol import JobRef
from caravel.store.schema import jobs
from caravel.testing import ManualClock
from tests.support import Add, Report, dispatch, make_registry, open_queue
from tests.support.databases import (
    SqliteTemplate,
    create_mariadb_database,
    create_pg_database,
    drop_mariadb_database,
    drop_pg_database,
    sqlite_url,
)

APP_BACKENDS = ("sqlite", "postgresql", "mariadb")
#: The SQLAlchemy drivers the application uses (sync, async) on each.
DRIVERS = {
    "sqlite": ("sqlite+pysqlite", "sqlite+aiosqlite"),
    "postgresql": ("postgresql+psycopg", "postgresql+psycopg"),
    "mariadb": ("mariadb+pymysql", "mariadb+asyncmy"),
}


# ----- the application ---------------------------------------------------------------------


class AppBase(DeclarativeBase):
    """The application's own models; the outbox is added to their metadata."""


class ReportRow(AppBase):
    __tablename__ = "reports"

    id: Mapped[int] = mapped_column(primary_key=True)
    title: Mapped[str] = mapped_column(sa.String(200))


Envelope = add_outbox(AppBase.metadata)
OUTBOX = AppBase.metadata.tables["caravel_outbox"]


@dataclass
class AppDb:
    """An application database holding ``reports`` and the outbox table."""

    backend: str
    url: str  # as a user writes it: sqlite:///path or postgresql://...
    engine: sa.Engine

    @property
    def async_url(self) -> str:
        driver = DRIVERS[self.backend][1]
        return sa.make_url(self.url).set(drivername=driver).render_as_string(hide_password=False)

    def session(self) -> Session:
        return Session(self.engine)

    @asynccontextmanager
    async def async_sessions(self) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
        engine = create_async_engine(self.async_url)
        try:
            yield async_sessionmaker(engine, expire_on_commit=False)
        finally:
            await engine.dispose()

    def envelopes(self) -> list[Any]:
        """Every outbox row, read on a separate connection, oldest first."""
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(OUTBOX).order_by(OUTBOX.c.staged_at, OUTBOX.c.id)))

    def envelope(self, envelope_id: UUID) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(OUTBOX).where(OUTBOX.c.id == envelope_id)).one()

    def titles(self) -> list[str]:
        with self.engine.connect() as conn:
            return list(
                conn.scalars(sa.select(ReportRow.__table__.c.title).order_by(sa.text("id")))
            )

    def execute(self, statement: sa.Executable) -> None:
        with self.engine.begin() as conn:
            conn.execute(statement)


@contextmanager
def application_database(backend: str, tmp_path: Path) -> Iterator[AppDb]:
    """A fresh application database with its tables created (standing in for the
    application's own migration)."""
    if backend == "sqlite":
        url = sqlite_url(tmp_path / "app.db")
    elif backend == "mariadb":
        url = create_mariadb_database("caravel_app")
    else:
        url = create_pg_database("caravel_app")
    engine = sa.create_engine(sa.make_url(url).set(drivername=DRIVERS[backend][0]))
    try:
        AppBase.metadata.create_all(engine)
        yield AppDb(backend, url, engine)
    finally:
        engine.dispose()
        if backend == "postgresql":
            drop_pg_database(url)
        elif backend == "mariadb":
            drop_mariadb_database(url)


@pytest.fixture(params=APP_BACKENDS)
def app_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AppDb]:
    with application_database(request.param, tmp_path) as db:
        yield db


@pytest.fixture
def queue_url(app_db: AppDb, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty queue database on the application's backend, separate from it."""
    if app_db.backend == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        return template.copy_to(tmp_path / "queue.db")
    url: str = request.getfixturevalue("mariadb_url" if app_db.backend == "mariadb" else "pg_url")
    return url


def outbox() -> Outbox:
    return Outbox(make_registry(), Envelope)


def stage_committed(db: AppDb, job: object, options: Any, title: str | None = None) -> StagedIntent:
    with db.session() as session:
        if title is not None:
            session.add(ReportRow(title=title))
        staged = outbox().stage(session, job, options)
        session.commit()
    return staged


async def queue_jobs(queue: DatabaseQueue) -> list[Any]:
    """Every row of the queue's jobs table."""
    engine = queue.store.inner.engine  # type: ignore[attr-defined]  # the SQL store's engine
    async with engine.connect() as conn:
        result = await conn.execute(
            sa.select(jobs.c.id, jobs.c.job_type, jobs.c.payload, jobs.c.idempotency_key)
        )
        return list(result)


@asynccontextmanager
async def relay_for(app: str, queue: DatabaseQueue, **options: Any) -> AsyncIterator[OutboxRelay]:
    relay = OutboxRelay(app, queue, **options)
    try:
        yield relay
    finally:
        await relay.close()


# ----- staging -----------------------------------------------------------------------------


def test_sync_commit_saves_the_business_row_and_the_envelope(app_db: AppDb) -> None:
    with app_db.session() as session:
        session.add(ReportRow(title="q1"))
        staged = outbox().stage(session, Add(1, note="n"), dispatch("k1", max_attempts=5))
        session.commit()
    assert staged.already_staged is False
    assert app_db.titles() == ["q1"]
    (row,) = app_db.envelopes()
    assert row.id == staged.outbox_id
    assert (row.queue, row.tenant_id, row.idempotency_key, row.job_type) == (
        "default",
        "tenant-a",
        "k1",
        "tests.add.v1",
    )
    assert json.loads(row.payload) == {"amount": 1, "note": "n"}
    assert row.max_attempts == 5
    assert row.due_at is None  # left to the queue
    assert row.dispatched_at is None
    assert row.queue_job_id is None
    assert row.relay_failure is None


def test_sync_rollback_saves_neither(app_db: AppDb) -> None:
    with app_db.session() as session:
        session.add(ReportRow(title="q1"))
        outbox().stage(session, Add(1), dispatch("k1"))
        session.rollback()

    def failing_unit_of_work(session: Session) -> None:
        with session.begin():
            session.add(ReportRow(title="q2"))
            outbox().stage(session, Add(2), dispatch("k2"))
            raise RuntimeError("the application's transaction fails")

    with app_db.session() as session, pytest.raises(RuntimeError):
        failing_unit_of_work(session)
    assert app_db.titles() == []
    assert app_db.envelopes() == []


async def test_async_commit_saves_the_business_row_and_the_envelope(app_db: AppDb) -> None:
    async with app_db.async_sessions() as sessions, sessions() as session:
        session.add(ReportRow(title="q1"))
        staged = await outbox().stage(session, Report(report_id="r1", pages=[3]), dispatch("k"))
        await session.commit()
    assert staged.already_staged is False
    assert app_db.titles() == ["q1"]
    (row,) = app_db.envelopes()
    assert row.id == staged.outbox_id
    assert row.job_type == "tests.report.v1"
    assert json.loads(row.payload) == {"report_id": "r1", "pages": [3]}


async def test_async_rollback_saves_neither(app_db: AppDb) -> None:
    async with app_db.async_sessions() as sessions:
        async with sessions() as session:
            session.add(ReportRow(title="q1"))
            await outbox().stage(session, Add(1), dispatch("k1"))
            await session.rollback()

        async def failing_unit_of_work() -> None:
            async with sessions() as session, session.begin():
                session.add(ReportRow(title="q2"))
                await outbox().stage(session, Add(2), dispatch("k2"))
                raise RuntimeError("the application's transaction fails")

        with pytest.raises(RuntimeError):
            await failing_unit_of_work()
    assert app_db.titles() == []
    assert app_db.envelopes() == []


async def test_stage_neither_commits_nor_touches_the_queue(app_db: AppDb, queue_url: str) -> None:
    with app_db.session() as session:
        session.add(ReportRow(title="q1"))
        staged = outbox().stage(session, Add(1), dispatch("k1"))
        session.flush()  # even written to the transaction, it is not committed
        assert app_db.envelopes() == []
        assert app_db.titles() == []
        session.commit()
    assert [row.id for row in app_db.envelopes()] == [staged.outbox_id]
    async with open_queue(queue_url) as queue:
        assert await queue_jobs(queue) == []
        async with relay_for(app_db.url, queue) as relay:
            assert await relay.run_once() == 1
        assert [row.id for row in await queue_jobs(queue)] == [staged.outbox_id]


INVALID_JOBS = [
    pytest.param({"amount": 1}, UnknownJobTypeError, None, id="unregistered-type"),
    pytest.param(Add(1, note="x" * 70_000), ValidationError, "payload", id="oversized-payload"),
]


@pytest.mark.parametrize(("job", "error", "field"), INVALID_JOBS)
async def test_stage_validates_exactly_like_enqueue_and_adds_nothing(
    app_db: AppDb, queue_url: str, job: object, error: type[Exception], field: str | None
) -> None:
    async with open_queue(queue_url) as queue:
        with pytest.raises(error) as by_enqueue:
            await queue.enqueue(job, dispatch("k"))
        assert await queue_jobs(queue) == []

    with app_db.session() as session:
        with pytest.raises(error) as by_sync_stage:
            outbox().stage(session, job, dispatch("k"))
        assert not session.new
        session.commit()
    async with app_db.async_sessions() as sessions, sessions() as session:
        with pytest.raises(error) as by_async_stage:
            await outbox().stage(session, job, dispatch("k"))
        assert not session.new
        await session.commit()

    for caught in (by_sync_stage, by_async_stage):
        assert type(caught.value) is type(by_enqueue.value)
        assert str(caught.value) == str(by_enqueue.value)
        if field is not None:
            assert isinstance(caught.value, ValidationError)
            assert caught.value.field == field
    assert app_db.envelopes() == []


async def test_restaging_the_same_content_returns_the_existing_intent_even_after_dispatch(
    app_db: AppDb, queue_url: str
) -> None:
    first = stage_committed(app_db, Add(1, note="n"), dispatch("k1"))
    assert first.already_staged is False

    with app_db.session() as session:
        again = outbox().stage(session, Add(1, note="n"), dispatch("k1"))
        assert not session.new
        session.commit()
    assert again == StagedIntent(first.outbox_id, already_staged=True)

    async with open_queue(queue_url) as queue, relay_for(app_db.url, queue) as relay:
        assert await relay.run_once() == 1
    assert app_db.envelope(first.outbox_id).dispatched_at is not None

    async with app_db.async_sessions() as sessions, sessions() as session:
        after = await outbox().stage(session, Add(1, note="n"), dispatch("k1"))
        assert not session.new
        await session.commit()
    assert after == StagedIntent(first.outbox_id, already_staged=True)
    assert [row.id for row in app_db.envelopes()] == [first.outbox_id]


@pytest.mark.parametrize(
    "second",
    [Add(2, note="n"), Add(1, note="other"), Report(report_id="r")],
    ids=["other-value", "other-field", "other-type"],
)
async def test_restaging_a_key_with_different_content_conflicts(
    app_db: AppDb, second: object
) -> None:
    first = stage_committed(app_db, Add(1, note="n"), dispatch("k1"))
    with app_db.session() as session:
        with pytest.raises(IdempotencyConflictError) as sync_conflict:
            outbox().stage(session, second, dispatch("k1"))
        assert not session.new
    async with app_db.async_sessions() as sessions, sessions() as session:
        with pytest.raises(IdempotencyConflictError) as async_conflict:
            await outbox().stage(session, second, dispatch("k1"))
        assert not session.new
    assert sync_conflict.value.job_id == first.outbox_id
    assert async_conflict.value.job_id == first.outbox_id
    assert [row.id for row in app_db.envelopes()] == [first.outbox_id]


def test_keys_are_scoped_by_queue_and_tenant(app_db: AppDb) -> None:
    staged = [
        stage_committed(app_db, Add(1), dispatch("k")),
        stage_committed(app_db, Add(1), dispatch("k", queue="other")),
        stage_committed(app_db, Add(1), dispatch("k", tenant="tenant-b")),
        stage_committed(app_db, Add(1), dispatch("k", tenant="Tenant-A")),
    ]
    assert not any(s.already_staged for s in staged)
    assert len({s.outbox_id for s in staged}) == 4
    assert len(app_db.envelopes()) == 4


def test_two_sessions_staging_one_key_at_once_leave_one_intent(app_db: AppDb) -> None:
    box = outbox()
    a = app_db.session()
    b = app_db.session()
    try:
        # Staging first: its lookup would otherwise flush the report (and, on SQLite, take
        # the file's write lock before the other session staged).
        won = box.stage(a, Add(1), dispatch("race"))
        lost = box.stage(b, Add(1), dispatch("race"))
        a.add(ReportRow(title="from-a"))
        b.add(ReportRow(title="from-b"))
        assert won.already_staged is False
        assert lost.already_staged is False  # neither could see the other yet
        assert won.outbox_id != lost.outbox_id
        a.commit()
        with pytest.raises(sa.exc.IntegrityError) as caught:
            b.commit()
        assert "caravel_outbox" in str(caught.value.orig)
        b.rollback()
    finally:
        a.close()
        b.close()
    assert app_db.titles() == ["from-a"]  # the loser's whole unit of work was rolled back
    assert [row.id for row in app_db.envelopes()] == [won.outbox_id]

    # The application retries the loser's whole unit of work in a fresh session.
    with app_db.session() as retry:
        again = box.stage(retry, Add(1), dispatch("race"))
        retry.add(ReportRow(title="from-b"))
        retry.commit()
    assert again == StagedIntent(won.outbox_id, already_staged=True)
    assert app_db.titles() == ["from-a", "from-b"]
    assert [row.id for row in app_db.envelopes()] == [won.outbox_id]


# ----- the relay ---------------------------------------------------------------------------


async def test_relay_enqueues_the_original_job_and_records_the_dispatch(
    app_db: AppDb, queue_url: str
) -> None:
    not_before = datetime(2031, 2, 3, 4, 5, 6, 789_000, tzinfo=UTC)
    scheduled = stage_committed(
        app_db,
        Add(5, note="x"),
        dispatch("k1", queue="mail", tenant="tenant-b", not_before=not_before, max_attempts=7),
        title="with a report",
    )
    plain = stage_committed(app_db, Report(report_id="r1", pages=[1, 2]), dispatch())
    staged_payloads = {row.id: row.payload for row in app_db.envelopes()}

    clock = ManualClock()
    async with open_queue(queue_url, clock=clock, max_attempts=4) as queue:
        async with relay_for(app_db.url, queue) as relay:
            assert await relay.run_once() == 2
            assert relay.dispatched == 2
            assert await relay.run_once() == 0
            assert relay.dispatched == 2

        status = await queue.get_status(scheduled.outbox_id, "mail", "tenant-b")
        assert status is not None
        assert status.job_type == "tests.add.v1"
        assert status.state is JobState.READY
        assert status.attempt == 0
        assert status.max_attempts == 7
        assert status.due_at == not_before
        assert status.created_at == from_ms(clock.now_ms())
        payload = await queue.store.job_get_payload(JobRef(scheduled.outbox_id, "mail", "tenant-b"))
        assert payload is not None
        assert payload == staged_payloads[scheduled.outbox_id]
        assert json.loads(payload) == {"amount": 5, "note": "x"}

        status = await queue.get_status(plain.outbox_id, "default", "tenant-a")
        assert status is not None
        assert status.job_type == "tests.report.v1"
        assert status.max_attempts == 4  # the queue's default, at dispatch time
        assert status.due_at == from_ms(clock.now_ms())  # due when it was dispatched
        payload = await queue.store.job_get_payload(JobRef(plain.outbox_id, "default", "tenant-a"))
        assert payload == staged_payloads[plain.outbox_id]

        rows = {row.id: row for row in await queue_jobs(queue)}
        assert set(rows) == {scheduled.outbox_id, plain.outbox_id}
        assert rows[scheduled.outbox_id].idempotency_key == "k1"
        assert rows[plain.outbox_id].idempotency_key is None

    for staged in (scheduled, plain):
        row = app_db.envelope(staged.outbox_id)
        assert row.queue_job_id == staged.outbox_id
        assert row.dispatched_at == clock.now_ms()
        assert row.relay_failure is None
    assert app_db.titles() == ["with a report"]


async def test_relay_resolves_a_key_to_an_identical_job_already_in_the_queue(
    app_db: AppDb, queue_url: str
) -> None:
    async with open_queue(queue_url) as queue:
        direct = await queue.enqueue(Add(1, note="n"), dispatch("k1"))
        staged = stage_committed(app_db, Add(1, note="n"), dispatch("k1"))
        async with relay_for(app_db.url, queue) as relay:
            assert await relay.run_once() == 1
        assert [row.id for row in await queue_jobs(queue)] == [direct.job_id]
    row = app_db.envelope(staged.outbox_id)
    assert row.dispatched_at is not None
    assert row.queue_job_id == direct.job_id


async def test_relay_picks_up_a_transaction_that_commits_late(
    app_db: AppDb, queue_url: str
) -> None:
    box = outbox()
    late = app_db.session()
    try:
        early = box.stage(late, Add(1), dispatch())  # staged first, committed last
        on_time = stage_committed(app_db, Add(2), dispatch())
        async with open_queue(queue_url) as queue, relay_for(app_db.url, queue) as relay:
            assert await relay.run_once() == 1
            assert app_db.envelope(on_time.outbox_id).dispatched_at is not None
            late.commit()
            assert await relay.run_once() == 1
            assert {row.id for row in await queue_jobs(queue)} == {
                early.outbox_id,
                on_time.outbox_id,
            }
    finally:
        late.close()
    assert all(row.dispatched_at is not None for row in app_db.envelopes())


async def relay_and_check(app_url: str, db: AppDb, queue: DatabaseQueue) -> None:
    staged = [stage_committed(db, Add(i), dispatch(f"k{i}" if i % 2 else None)) for i in range(10)]
    async with relay_for(app_url, queue) as relay:
        assert await relay.run_once() == 10
        assert await relay.run_once() == 0
    rows = await queue_jobs(queue)
    assert sorted(row.id for row in rows) == sorted(s.outbox_id for s in staged)
    assert sorted(json.loads(row.payload)["amount"] for row in rows) == list(range(10))
    for row in db.envelopes():
        assert row.dispatched_at is not None
        assert row.queue_job_id == row.id


async def test_relay_with_the_queue_in_the_application_database(app_db: AppDb) -> None:
    migrate.upgrade(app_db.url)  # the queue's tables join the application's
    async with open_queue(app_db.url) as queue:
        await queue.check_schema()
        await relay_and_check(app_db.url, app_db, queue)
    with app_db.engine.connect() as conn:  # the jobs are in the application's own database
        assert conn.scalar(sa.select(sa.func.count()).select_from(jobs)) == 10


async def test_relay_with_the_queue_in_another_database(app_db: AppDb, queue_url: str) -> None:
    assert queue_url != app_db.url
    async with open_queue(queue_url) as queue:
        await relay_and_check(app_db.url, app_db, queue)
    with app_db.engine.connect() as conn:
        assert not sa.inspect(conn).has_table(jobs.name)


async def test_relay_from_a_postgresql_application_to_a_sqlite_queue(
    tmp_path: Path, sqlite_template: SqliteTemplate
) -> None:
    queue_url = sqlite_template.copy_to(tmp_path / "queue.db")
    with application_database("postgresql", tmp_path) as app:
        async with open_queue(queue_url) as queue:
            await relay_and_check(app.url, app, queue)


async def test_relay_from_a_mariadb_application_to_a_postgresql_queue(
    tmp_path: Path, pg_url: str
) -> None:
    with application_database("mariadb", tmp_path) as app:
        async with open_queue(pg_url) as queue:
            await relay_and_check(app.url, app, queue)


async def test_relay_from_a_postgresql_application_to_a_mariadb_queue(
    tmp_path: Path, mariadb_url: str
) -> None:
    with application_database("postgresql", tmp_path) as app:
        async with open_queue(mariadb_url) as queue:
            await relay_and_check(app.url, app, queue)


async def test_relay_from_a_sqlite_application_to_a_mariadb_queue(
    tmp_path: Path, mariadb_url: str
) -> None:
    with application_database("sqlite", tmp_path) as app:
        async with open_queue(mariadb_url) as queue:
            await relay_and_check(app.url, app, queue)


async def test_relay_from_a_sqlite_application_to_a_postgresql_queue(
    tmp_path: Path, pg_url: str
) -> None:
    with application_database("sqlite", tmp_path) as app:
        async with open_queue(pg_url) as queue:
            await relay_and_check(app.url, app, queue)


async def test_relay_accepts_the_applications_async_engine(app_db: AppDb, queue_url: str) -> None:
    staged = stage_committed(app_db, Add(1), dispatch())
    engine = create_async_engine(app_db.async_url)
    try:
        async with open_queue(queue_url) as queue:
            relay = OutboxRelay(engine, queue)
            assert await relay.run_once() == 1
            await relay.close()  # leaves the application's engine alone
            async with engine.connect() as conn:
                assert await conn.scalar(sa.select(OUTBOX.c.queue_job_id)) == staged.outbox_id
    finally:
        await engine.dispose()


@pytest.mark.parametrize("with_keys", [False, True], ids=["no-keys", "keys"])
async def test_three_concurrent_relays_make_exactly_one_job_per_intent(
    app_db: AppDb, queue_url: str, with_keys: bool
) -> None:
    box = outbox()
    with app_db.session() as session:
        staged = [
            box.stage(session, Add(i), dispatch(f"key-{i}" if with_keys else None))
            for i in range(500)
        ]
        session.commit()

    async def drain(relay: OutboxRelay) -> int:
        passes = 0
        while await relay.run_once():
            passes += 1
        return passes

    async with (
        open_queue(queue_url) as q1,
        open_queue(queue_url) as q2,
        open_queue(queue_url) as q3,
        relay_for(app_db.url, q1, batch_size=50) as r1,
        relay_for(app_db.url, q2, batch_size=50) as r2,
        relay_for(app_db.url, q3, batch_size=50) as r3,
    ):
        await asyncio.gather(drain(r1), drain(r2), drain(r3))
        assert r1.dispatched + r2.dispatched + r3.dispatched >= 500
        assert r1.stuck == r2.stuck == r3.stuck == 0
        rows = await queue_jobs(q1)

    assert len(rows) == 500
    job_ids = {row.id for row in rows}
    assert job_ids == {s.outbox_id for s in staged}
    assert sorted(json.loads(row.payload)["amount"] for row in rows) == list(range(500))
    envelopes = app_db.envelopes()
    assert len(envelopes) == 500
    for row in envelopes:
        assert row.dispatched_at is not None
        assert row.queue_job_id == row.id
        assert row.queue_job_id in job_ids


async def test_relay_after_a_crash_before_marking_sends_the_same_jobs_again(
    app_db: AppDb, queue_url: str
) -> None:
    staged = [
        stage_committed(app_db, Add(i), dispatch(f"k{i}" if i % 2 else None)) for i in range(6)
    ]
    async with open_queue(queue_url) as queue:
        async with relay_for(app_db.url, queue) as first:
            assert await first.run_once() == 6
        before = {row.id: row.queue_job_id for row in app_db.envelopes()}
        # The state a crash between the enqueue and the marking leaves behind.
        app_db.execute(sa.update(OUTBOX).values(dispatched_at=None, queue_job_id=None))
        assert all(row.dispatched_at is None for row in app_db.envelopes())

        async with relay_for(app_db.url, queue) as second:
            assert await second.run_once() == 6
            assert await second.run_once() == 0
        rows = await queue_jobs(queue)
    assert sorted(row.id for row in rows) == sorted(s.outbox_id for s in staged)
    after = {row.id: row.queue_job_id for row in app_db.envelopes()}
    assert after == before
    assert all(row.dispatched_at is not None for row in app_db.envelopes())


async def test_undecodable_envelopes_stay_pending_and_do_not_block_the_rest(
    app_db: AppDb, queue_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="caravel.outbox")
    first = stage_committed(app_db, Add(1, note="secret-first"), dispatch("k1"))
    gone = stage_committed(app_db, Add(2, note="secret-gone"), dispatch("k2"))
    corrupt = stage_committed(app_db, Add(3, note="secret-corrupt"), dispatch("k3"))
    last = stage_committed(app_db, Add(4, note="secret-last"), dispatch("k4"))
    app_db.execute(
        sa.update(OUTBOX).where(OUTBOX.c.id == gone.outbox_id).values(job_type="tests.gone.v1")
    )
    app_db.execute(
        sa.update(OUTBOX)
        .where(OUTBOX.c.id == corrupt.outbox_id)
        .values(payload='{"amount": 3, "note": "secret-corrupt')
    )

    clock = ManualClock()
    async with open_queue(queue_url, clock=clock) as queue, relay_for(app_db.url, queue) as relay:
        assert await relay.run_once() == 2
        assert relay.stuck == 2
        assert sorted(row.id for row in await queue_jobs(queue)) == sorted(
            [first.outbox_id, last.outbox_id]
        )
        for staged in (first, last):
            assert app_db.envelope(staged.outbox_id).queue_job_id == staged.outbox_id
        expected = {gone.outbox_id: "UnknownJobType", corrupt.outbox_id: "InvalidPayload"}
        for envelope_id, reason in expected.items():
            row = app_db.envelope(envelope_id)
            assert row.dispatched_at is None
            assert row.queue_job_id is None
            assert row.relay_failure == reason
            assert row.relay_attempts == 1
            assert row.retry_at == clock.now_ms() + 60_000

        records = [r for r in caplog.records if r.name == "caravel.outbox"]
        assert sorted((r.outbox_id, r.category) for r in records) == sorted(  # type: ignore[attr-defined]
            (str(envelope_id), reason) for envelope_id, reason in expected.items()
        )
        for record in records:
            assert record.levelno == logging.WARNING
            assert "secret" not in record.getMessage()
            assert "secret" not in repr(vars(record))

        # Not retried before its delay; then retried with a longer one.
        assert await relay.run_once() == 0
        assert relay.stuck == 2
        await clock.advance(timedelta(minutes=1))
        assert await relay.run_once() == 0
        assert relay.stuck == 4
        row = app_db.envelope(gone.outbox_id)
        assert row.relay_attempts == 2
        assert row.retry_at == clock.now_ms() + 120_000

        # A deliberate repair lets it through on a later pass.
        app_db.execute(
            sa.update(OUTBOX).where(OUTBOX.c.id == gone.outbox_id).values(job_type="tests.add.v1")
        )
        await clock.advance(timedelta(minutes=2))
        assert await relay.run_once() == 1
        assert len(await queue_jobs(queue)) == 3
    repaired = app_db.envelope(gone.outbox_id)
    assert repaired.queue_job_id == gone.outbox_id
    assert repaired.relay_failure is None
    assert repaired.retry_at is None
    assert app_db.envelope(corrupt.outbox_id).dispatched_at is None


async def test_a_key_conflicting_with_a_queue_job_stays_pending_and_does_not_block_the_rest(
    app_db: AppDb, queue_url: str
) -> None:
    async with open_queue(queue_url) as queue:
        direct = await queue.enqueue(Add(1), dispatch("shared"))
        conflicting = stage_committed(app_db, Add(2), dispatch("shared"))
        others = [stage_committed(app_db, Add(10 + i), dispatch(f"k{i}")) for i in range(3)]
        async with relay_for(app_db.url, queue) as relay:
            assert await relay.run_once() == 3
            assert relay.stuck == 1
        rows = await queue_jobs(queue)
        assert sorted(row.id for row in rows) == sorted(
            [direct.job_id, *(s.outbox_id for s in others)]
        )
        payload = await queue.store.job_get_payload(JobRef(direct.job_id, "default", "tenant-a"))
        assert payload is not None
        assert json.loads(payload)["amount"] == 1  # the queue's job was left alone
    row = app_db.envelope(conflicting.outbox_id)
    assert row.dispatched_at is None
    assert row.queue_job_id is None
    assert row.relay_failure == "IdempotencyConflict"
    for staged in others:
        assert app_db.envelope(staged.outbox_id).queue_job_id == staged.outbox_id


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 1001}, "batch_size"),
        ({"batch_size": True}, "batch_size"),
        ({"batch_size": 10.0}, "batch_size"),
        ({"poll_interval": timedelta(0)}, "poll_interval"),
        ({"poll_interval": timedelta(milliseconds=9)}, "poll_interval"),
        ({"poll_interval": timedelta(hours=1, milliseconds=1)}, "poll_interval"),
        ({"poll_interval": 1.0}, "poll_interval"),
    ],
    ids=lambda value: repr(value) if not isinstance(value, str) else value,
)
async def test_relay_options_are_validated(
    app_db: AppDb, queue_url: str, options: dict[str, Any], field: str
) -> None:
    async with open_queue(queue_url) as queue:
        with pytest.raises(OptionsError) as caught:
            OutboxRelay(app_db.url, queue, **options)
        assert caught.value.field == field
        assert field in str(caught.value)


async def test_relay_accepts_the_option_bounds(app_db: AppDb, queue_url: str) -> None:
    async with open_queue(queue_url) as queue:
        for options in (
            {"batch_size": 1, "poll_interval": timedelta(milliseconds=10)},
            {"batch_size": 1000, "poll_interval": timedelta(hours=1)},
        ):
            async with relay_for(app_db.url, queue, **options) as relay:
                assert relay.batch_size == options["batch_size"]
                assert await relay.run_once() == 0


async def test_batch_size_bounds_one_pass_and_the_oldest_go_first(
    app_db: AppDb, queue_url: str
) -> None:
    staging_clock = ManualClock()
    box = Outbox(make_registry(), Envelope, clock=staging_clock)
    staged: list[UUID] = []
    for i in range(5):
        with app_db.session() as session:
            staged.append(box.stage(session, Add(i), dispatch()).outbox_id)
            session.commit()
        await staging_clock.advance(timedelta(milliseconds=1))
    async with open_queue(queue_url) as queue, relay_for(app_db.url, queue, batch_size=2) as relay:
        passes = []
        for _ in range(4):
            sent = await relay.run_once()
            dispatched = {row.id for row in app_db.envelopes() if row.dispatched_at is not None}
            passes.append((sent, dispatched))
        amounts = [json.loads(row.payload)["amount"] for row in await queue_jobs(queue)]
    assert passes == [
        (2, set(staged[:2])),
        (2, set(staged[:4])),
        (1, set(staged)),
        (0, set(staged)),
    ]
    assert sorted(amounts) == [0, 1, 2, 3, 4]


def test_due_time_survives_staging_to_the_millisecond(app_db: AppDb) -> None:
    not_before = datetime(2031, 5, 6, 7, 8, 9, 123_456, tzinfo=UTC)
    staged = stage_committed(app_db, Add(1), dispatch(not_before=not_before))
    assert app_db.envelope(staged.outbox_id).due_at == to_ms_ceil(not_before)


async def test_an_intent_staged_without_tenant_becomes_a_job_of_the_default_tenant(
    app_db: AppDb, queue_url: str
) -> None:
    staged = stage_committed(app_db, Add(3), DispatchOptions(queue="single"))
    assert app_db.envelope(staged.outbox_id).tenant_id == DEFAULT_TENANT
    async with open_queue(queue_url) as queue:
        async with relay_for(app_db.url, queue) as relay:
            assert await relay.run_once() == 1
        status = await queue.get_status(staged.outbox_id, "single")
        assert status is not None
        assert status.tenant_id == DEFAULT_TENANT
        assert await queue.get_status(staged.outbox_id, "single", "other") is None


async def test_a_delay_counts_from_staging_not_from_the_relay(
    app_db: AppDb, queue_url: str
) -> None:
    staging_clock = ManualClock()
    with app_db.session() as session:
        staged = Outbox(make_registry(), Envelope, clock=staging_clock).stage(
            session, Add(1), dispatch(delay=timedelta(minutes=5))
        )
        session.commit()
    assert app_db.envelope(staged.outbox_id).due_at == staging_clock.now_ms() + 300_000

    relay_clock = ManualClock()
    await relay_clock.advance(timedelta(minutes=2))  # the relay runs two minutes later
    async with open_queue(queue_url, clock=relay_clock) as queue:
        async with relay_for(app_db.url, queue) as relay:
            assert await relay.run_once() == 1
        status = await queue.get_status(staged.outbox_id, "default", "tenant-a")
        assert status is not None
        assert status.due_at == from_ms(staging_clock.now_ms() + 300_000)
