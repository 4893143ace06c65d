"""A downgrade that would delete rows or strand jobs refuses, naming how many of what, and
changes nothing; forced, it goes ahead and reports what went. On every database."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from caravel import (
    ConcurrencyLimit,
    DatabaseNotFoundError,
    DatabaseQueue,
    DowngradeRefusedError,
    FailureCategory,
    JobState,
    Leases,
    QueueInspector,
    RateLimit,
    Retention,
    StoreError,
    ValidationError,
    migrate,
)
from caravel.migrations.losses import LossKind
from caravel.testing import ManualClock
from tests.migrations.conftest import is_mariadb, skip_before_mariadb
from tests.support import Add, dispatch, open_queue
from tests.support.databases import execute_sql, sync_engine

GUIDE = Path(__file__).parents[2] / "docs" / "guides" / "migrations.md"
TENANT = "tenant-a"


def _snapshot(url: str) -> dict[str, Any]:
    """The applied revision and every row of every Caravel table, in a stable order."""
    engine = sync_engine(url)
    try:
        tables = sorted(t for t in sa.inspect(engine).get_table_names() if t.startswith("caravel_"))
        rows: dict[str, Any] = {"revision": migrate.current(url)}
        with engine.connect() as conn:
            for table in tables:
                found = conn.exec_driver_sql(f"SELECT * FROM {table}")
                rows[table] = sorted((tuple(map(repr, row)) for row in found), key=repr)
        return rows
    finally:
        engine.dispose()


def _refusal(url: str, revision: str) -> DowngradeRefusedError:
    before = _snapshot(url)
    with pytest.raises(DowngradeRefusedError) as caught:
        migrate.downgrade(url, revision)
    assert _snapshot(url) == before  # the revision and every row, unchanged
    return caught.value


def _taken(report: migrate.DowngradeReport) -> list[tuple[str, str, int, str]]:
    return [(x.revision, x.kind, x.rows, x.fate) for x in report.losses]


async def _complete(queue: DatabaseQueue, name: str = "default") -> None:
    leases = Leases(queue)
    while (claimed := await leases.claim(name)) is not None:
        await leases.complete(claimed.lease)


@dataclass(frozen=True)
class Linked:
    held_steps: list[UUID]
    callback: UUID


async def _held_jobs(url: str) -> Linked:
    """A three-step chain (two steps held) and a one-job batch with a held callback."""
    async with open_queue(url) as queue:
        chain = await queue.enqueue_chain(
            [(Add(1), dispatch("chain")), (Add(2), dispatch()), (Add(3), dispatch())]
        )
        batch = await queue.enqueue_batch([(Add(4), dispatch())], callback=(Add(5), dispatch()))
    assert batch.callback_id is not None
    return Linked(chain.job_ids[1:], batch.callback_id)


async def _job_life_rows(url: str) -> None:
    """A cancelled job, a key tombstone, a paused queue, and a ready job that stays."""
    clock = ManualClock()
    async with open_queue(url, clock=clock) as queue:
        await queue.enqueue(Add(1), dispatch("pruned-key", queue="done"))
        await _complete(queue, "done")
        await clock.advance(timedelta(days=8))
        pruned = await queue.prune(Retention(completed=timedelta(days=7)))
        assert pruned.tombstoned == 1
        cancelled = await queue.enqueue(Add(2), dispatch("cancelled-key"))
        await queue.cancel(cancelled.job_id, "default", TENANT)
        await queue.enqueue(Add(3), dispatch("stays"))
        assert await queue.pause_queue("default")


# ----- nothing to lose ---------------------------------------------------------------------


def test_an_empty_queue_downgrades_to_base_without_force(empty_url: str) -> None:
    migrate.upgrade(empty_url)

    report = migrate.downgrade(empty_url, "base")

    assert report == migrate.DowngradeReport(migrate.head(), None, ())
    assert migrate.current(empty_url) is None


async def test_finished_chains_and_batches_lose_nothing_but_their_records(
    empty_url: str,
) -> None:
    skip_before_mariadb(empty_url, "0009")
    migrate.upgrade(empty_url)
    async with open_queue(empty_url) as queue:
        await queue.enqueue_chain([(Add(1), dispatch()), (Add(2), dispatch())])
        await _complete(queue)  # the chain finished: no step is held any more
    # Only the steps' attempt records (revision 0015's) go; nothing of the chain's.
    report = migrate.downgrade(empty_url, "0008", force=True)
    assert _taken(report) == [("0015", "attempt_records", 2, "deleted")]


# ----- 0009: held chain steps and batch callbacks ------------------------------------------


async def test_held_chain_steps_and_callbacks_refuse_a_downgrade_below_0009(
    empty_url: str,
) -> None:
    skip_before_mariadb(empty_url, "0009")
    migrate.upgrade(empty_url)
    await _held_jobs(empty_url)

    refused = _refusal(empty_url, "0008")

    assert refused.target == "0008"
    assert refused.counts == {"held_chain_steps": 2, "held_batch_callbacks": 1, "batches": 1}
    message = str(refused)
    assert "2 held chain steps" in message
    assert "1 held batch callback" in message
    assert "--force" in message
    assert "\n" not in message


async def test_forced_below_0009_the_held_jobs_become_dead_letters_to_replay(
    empty_url: str,
) -> None:
    skip_before_mariadb(empty_url, "0009")
    migrate.upgrade(empty_url)
    linked = await _held_jobs(empty_url)

    report = migrate.downgrade(empty_url, "0008", force=True)

    assert (report.previous, report.current) == (migrate.head(), "0008")
    assert _taken(report) == [
        ("0009", "held_chain_steps", 2, "dead_lettered"),
        ("0009", "held_batch_callbacks", 1, "dead_lettered"),
        ("0009", "batches", 1, "deleted"),
    ]
    assert migrate.current(empty_url) == "0008"
    # None is left due in 9999 to wait for a release that no longer exists.
    held = "state = 'ready' AND due_at > 253402300000000"
    engine = sync_engine(empty_url)
    try:
        with engine.connect() as conn:
            left = conn.exec_driver_sql(f"SELECT count(*) FROM caravel_jobs WHERE {held}")
            assert left.scalar_one() == 0
    finally:
        engine.dispose()

    migrate.upgrade(empty_url)
    async with open_queue(empty_url) as queue:
        for job_id in [*linked.held_steps, linked.callback]:
            status = await queue.get_status(job_id, "default", TENANT)
            assert status is not None
            assert status.state is JobState.DEAD_LETTER
            assert status.last_failure == FailureCategory.RELEASE_LOST
            assert status.finished_at is not None
        assert await queue.replay(linked.held_steps[0], "default", TENANT)
        leases = Leases(queue)
        claimed = {c.lease.job_id for c in [await leases.claim("default") for _ in range(3)] if c}
        assert linked.held_steps[0] in claimed  # it runs once replayed


# ----- 0006: cancelled jobs, tombstones, pauses --------------------------------------------


async def test_cancelled_jobs_tombstones_and_pauses_refuse_a_downgrade_below_0006(
    empty_url: str,
) -> None:
    skip_before_mariadb(empty_url, "0006")
    migrate.upgrade(empty_url)
    await _job_life_rows(empty_url)

    refused = _refusal(empty_url, "0005")

    assert refused.target == "0005"
    assert refused.counts == {"cancelled_jobs": 1, "key_tombstones": 1, "paused_queues": 1}
    assert "delete 1 cancelled job, delete 1 key tombstone, resume 1 paused queue" in str(refused)


async def test_forced_below_0006_deletes_them_and_keeps_the_rest(empty_url: str) -> None:
    skip_before_mariadb(empty_url, "0006")
    migrate.upgrade(empty_url)
    await _job_life_rows(empty_url)

    report = migrate.downgrade(empty_url, "0005", force=True)

    assert _taken(report) == [
        ("0006", "cancelled_jobs", 1, "deleted"),
        ("0006", "key_tombstones", 1, "deleted"),
        ("0006", "paused_queues", 1, "resumed"),
    ]
    rows = _snapshot(empty_url)
    assert rows["revision"] == "0005"
    assert "caravel_queues" not in rows
    assert len(rows["caravel_jobs"]) == 1  # the ready job
    assert "'stays'" in rows["caravel_jobs"][0]


# ----- 0011: stored concurrency limits ----------------------------------------------------


async def test_stored_limits_refuse_a_downgrade_below_0011_and_go_when_forced(
    empty_url: str,
) -> None:
    skip_before_mariadb(empty_url, "0011")
    migrate.upgrade(empty_url)
    async with open_queue(empty_url) as queue:
        await queue.set_queue_limit(ConcurrencyLimit(queue="emails", concurrency=3, per_key=1))
        await queue.enqueue(Add(1), dispatch(partition_key="acct-1"))

    refused = _refusal(empty_url, "0009")
    assert refused.counts == {"queue_limits": 1}
    assert "delete 1 queue limit" in str(refused)

    report = migrate.downgrade(empty_url, "0009", force=True)
    assert _taken(report) == [("0011", "queue_limits", 1, "deleted")]
    rows = _snapshot(empty_url)
    assert "caravel_queue_limits" not in rows
    assert len(rows["caravel_jobs"]) == 1  # the job stays, without its partition key
    assert "'acct-1'" not in rows["caravel_jobs"][0]
    migrate.upgrade(empty_url)  # and back: the table empty, the column NULL
    async with open_queue(empty_url) as queue:
        assert await QueueInspector(queue.store).queue_limits() == []


# ----- 0013: fair dispatch ----------------------------------------------------------------


async def test_fairness_refuses_a_downgrade_below_0013_and_goes_alone_when_forced(
    empty_url: str,
) -> None:
    skip_before_mariadb(empty_url, "0013")
    migrate.upgrade(empty_url)
    async with open_queue(empty_url) as queue:
        await queue.set_queue_limit(ConcurrencyLimit(queue="emails", fair=True, weights={"a": 3}))
        await queue.set_queue_limit(RateLimit(queue="emails", rate=5, period=timedelta(minutes=1)))
        await queue.set_queue_limit(ConcurrencyLimit(queue="pdfs", per_key=2, fair=True))
        await queue.set_queue_limit(ConcurrencyLimit(queue="solo", fair=True))

    refused = _refusal(empty_url, "0012")
    assert refused.counts == {"queue_fairness": 3, "queue_weights": 1}

    report = migrate.downgrade(empty_url, "0012", force=True)
    assert _taken(report) == [
        ("0013", "queue_fairness", 3, "deleted"),
        ("0013", "queue_weights", 1, "deleted"),
    ]
    rows = _snapshot(empty_url)
    assert "caravel_queue_weights" not in rows
    # The row that held fairness alone went; the others keep their rate and their cap.
    assert len(rows["caravel_queue_limits"]) == 2
    migrate.upgrade(empty_url)
    async with open_queue(empty_url) as queue:
        found = await QueueInspector(queue.store).queue_limits()
    assert [(q.queue, q.per_key, q.rate, q.fair, dict(q.weights)) for q in found] == [
        ("emails", None, 5, False, {}),
        ("pdfs", 2, None, False, {}),
    ]


# ----- base: every job ---------------------------------------------------------------------


async def test_base_refuses_while_jobs_are_left_and_counts_each_row_once(
    empty_url: str,
) -> None:
    migrate.upgrade(empty_url)
    await _job_life_rows(empty_url)
    async with open_queue(empty_url) as queue:
        assert await queue.pause_schedule("nightly")

    refused = _refusal(empty_url, "base")

    assert refused.target == "base"
    if is_mariadb(empty_url):
        # One step, 0016's: every job (the cancelled one and the tombstone among them), the
        # paused queue and the schedule's state.
        assert refused.counts == {"all_jobs": 3, "all_paused_queues": 1, "all_schedules": 1}
        report = migrate.downgrade(empty_url, "base", force=True)
        assert [(x.kind, x.rows) for x in report.losses] == list(refused.counts.items())
        assert _snapshot(empty_url) == {"revision": None, "caravel_alembic_version": []}
        return
    assert refused.counts == {
        "schedules": 1,
        "cancelled_jobs": 1,
        "key_tombstones": 1,
        "paused_queues": 1,
        "jobs": 1,  # the ready job: 0006 takes the cancelled one and the tombstone first
    }

    report = migrate.downgrade(empty_url, "base", force=True)
    assert [(x.kind, x.rows) for x in report.losses] == list(refused.counts.items())
    assert report.current is None
    assert _snapshot(empty_url) == {"revision": None, "caravel_alembic_version": []}


# ----- one transaction ---------------------------------------------------------------------


async def test_a_step_that_fails_leaves_the_database_as_it_was(empty_url: str) -> None:
    if is_mariadb(empty_url):
        pytest.skip("MariaDB commits each DDL statement: a failed step keeps the ones before it")
    migrate.upgrade(empty_url)
    await _held_jobs(empty_url)
    # An operator dropped an index by hand: 0005's downgrade fails after 0009 to 0006 ran.
    execute_sql(empty_url, "DROP INDEX ix_caravel_jobs_finished")
    before = _snapshot(empty_url)

    with pytest.raises(StoreError, match="ix_caravel_jobs_finished"):
        migrate.downgrade(empty_url, "0003", force=True)

    assert _snapshot(empty_url) == before  # the held jobs held, the batches still there
    engine = sync_engine(empty_url)
    try:
        columns = {c["name"] for c in sa.inspect(engine).get_columns("caravel_jobs")}
    finally:
        engine.dispose()
    assert {"chain_id", "priority", "result"} <= columns


async def test_the_awaitable_form_refuses_and_forces_alike(empty_url: str) -> None:
    skip_before_mariadb(empty_url, "0009")
    migrate.upgrade(empty_url)
    await _held_jobs(empty_url)
    with pytest.raises(DowngradeRefusedError):
        await migrate.downgrade_async(empty_url, "0008")
    report = await migrate.downgrade_async(empty_url, "0008", force=True)
    assert report.current == "0008"
    assert [x.kind for x in report.losses] == [
        "held_chain_steps",
        "held_batch_callbacks",
        "batches",
    ]


# ----- every revision says what its downgrade takes ----------------------------------------


def _declared() -> dict[str, tuple[LossKind, ...]]:
    script = ScriptDirectory.from_config(migrate._config("sqlite://"))
    return {s.revision: s.module.LOSSES for s in script.walk_revisions()}


def test_every_revision_declares_its_losses_and_the_guide_names_them() -> None:
    declared = _declared()
    assert sorted(declared) == [f"{n:04d}" for n in range(1, int(migrate.head()) + 1)]
    kinds = [kind for losses in declared.values() for kind in losses]
    assert all(isinstance(kind, LossKind) for kind in kinds)
    names = [kind.name for kind in kinds]
    assert len(names) == len(set(names))  # a kind is named once in the whole history
    guide = GUIDE.read_text()
    for revision in declared:
        assert f"| `{revision}` |" in guide
    for name in names:
        assert f"`{name}`" in guide


# ----- a file that is not there ------------------------------------------------------------


def test_a_missing_sqlite_file_is_reported_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "queue.db"
    with pytest.raises(DatabaseNotFoundError) as caught:
        migrate.downgrade(f"sqlite:///{missing}", "base")
    assert caught.value.path == str(missing)
    with pytest.raises(ValidationError, match="'zzz' is not a queue migration"):
        migrate.downgrade(f"sqlite:///{missing}", "zzz")  # the typo is named first
    assert not missing.exists()
