"""The queue's migrations on every database: upgrade, check, downgrade, and what an application
sees when it forgot to run them."""

from __future__ import annotations

from importlib.resources import files
from typing import Any
from uuid import UUID, uuid4

import pytest
import sqlalchemy as sa
from alembic.autogenerate import produce_migrations
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import make_url

from caravel import DatabaseQueue, DowngradeRefusedError, Leases, SchemaNotReadyError, migrate
from tests.migrations.conftest import is_mariadb, skip_before_mariadb
from tests.support import Add, dispatch, make_registry, open_queue
from tests.support.databases import execute_sql, sync_engine

JOBS = "caravel_jobs"
VERSION = "caravel_alembic_version"
UPGRADE_HINT = "caravel db upgrade"


def _tables(url: str) -> set[str]:
    engine = sync_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    engine = sync_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.exec_driver_sql(query)]
    finally:
        engine.dispose()


def _autogenerate_is_empty(url: str) -> bool:
    """Run Alembic autogenerate ourselves (not through ``migrate.check``)."""
    engine = sync_engine(url)
    try:
        with engine.connect() as conn:
            model, included = migrate._schema_model(conn.dialect.name)
            context = MigrationContext.configure(
                conn,
                opts={
                    "version_table": VERSION,
                    "compare_type": True,
                    "include_object": included,
                    "target_metadata": model,
                },
            )
            script = produce_migrations(context, model)
            assert script.upgrade_ops is not None
            return script.upgrade_ops.is_empty()
    finally:
        engine.dispose()


# ----- upgrade and check -------------------------------------------------------------------


def test_upgrade_from_empty_creates_the_tables_and_own_version_table(empty_url: str) -> None:
    assert not (_tables(empty_url) & {JOBS, VERSION})
    assert migrate.current(empty_url) is None

    migrate.upgrade(empty_url)

    tables = _tables(empty_url)
    assert {JOBS, VERSION} <= tables
    assert "alembic_version" not in tables  # the application's name stays free
    assert _rows(empty_url, f"SELECT version_num FROM {VERSION}") == [(migrate.head(),)]
    assert migrate.current(empty_url) == migrate.head()

    engine = sync_engine(empty_url)
    try:
        inspector = sa.inspect(engine)
        model, _ = migrate._schema_model(engine.dialect.name)
        columns = {column["name"] for column in inspector.get_columns(JOBS)}
        assert columns == set(model.tables[JOBS].columns.keys())
        assert "ix_caravel_jobs_claim" in {index["name"] for index in inspector.get_indexes(JOBS)}
        assert inspector.get_pk_constraint(JOBS)["constrained_columns"] == ["id"]
        if not is_mariadb(empty_url):
            assert inspector.get_unique_constraints(JOBS) == []  # uniqueness is the index below
    finally:
        engine.dispose()
    # MariaDB has no partial index: its unique index never compares a NULL key.
    expected = (*IDEMPOTENCY_INDEX[:2], "") if is_mariadb(empty_url) else IDEMPOTENCY_INDEX
    assert _idempotency_index(empty_url) == expected


def test_upgrade_twice_is_a_no_op(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    migrate.upgrade(empty_url)
    assert _rows(empty_url, f"SELECT version_num FROM {VERSION}") == [(migrate.head(),)]


def test_the_named_head_is_the_newest_revision_alembic_finds() -> None:
    """The worker's schema check compares with ``caravel.migrations.HEAD`` instead of reading
    the history through Alembic: a new migration that forgets to move it fails here."""
    scripts = ScriptDirectory(str(files("caravel") / "migrations"))
    assert scripts.get_heads() == [migrate.head()]


def test_check_passes_after_upgrade_with_no_differences(empty_url: str) -> None:
    migrate.upgrade(empty_url)

    report = migrate.check(empty_url)

    assert report.current == migrate.head()
    assert report.head == migrate.head()
    assert report.differences == ()
    assert _autogenerate_is_empty(empty_url)


def test_check_on_an_empty_database_says_to_run_upgrade(empty_url: str) -> None:
    with pytest.raises(SchemaNotReadyError) as caught:
        migrate.check(empty_url)
    assert UPGRADE_HINT in str(caught.value)
    assert not (_tables(empty_url) & {JOBS, VERSION})  # check never creates anything


def test_check_finds_a_table_that_drifted_from_the_model(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    on = f" ON {JOBS}" if is_mariadb(empty_url) else ""
    execute_sql(empty_url, f"DROP INDEX ix_caravel_jobs_claim{on}")
    assert not _autogenerate_is_empty(empty_url)

    with pytest.raises(SchemaNotReadyError) as caught:
        migrate.check(empty_url)
    assert "ix_caravel_jobs_claim" in str(caught.value)
    assert UPGRADE_HINT in str(caught.value)


def test_check_rejects_a_revision_other_than_head(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    execute_sql(empty_url, f"UPDATE {VERSION} SET version_num = 'ffff'")

    with pytest.raises(SchemaNotReadyError) as caught:
        migrate.check(empty_url)
    assert "ffff" in str(caught.value)


# ----- the idempotency index (revision 0004) -----------------------------------------------

#: Unique over (queue, tenant, key), with entries only for jobs that have a key.
IDEMPOTENCY_INDEX = (True, ("queue", "tenant_id", "idempotency_key"), "idempotency_key IS NOT NULL")


def _idempotency_index(url: str) -> tuple[bool, tuple[str, ...], str] | None:
    """Whether ``uq_caravel_jobs_idempotency`` is a unique index, its columns and its predicate
    as the database reports them (normalised), or ``None`` when no such index exists."""
    engine = sync_engine(url)
    try:
        found = {
            ix["name"]: ix
            for ix in sa.inspect(engine).get_indexes(JOBS)
            if not ix.get("duplicates_constraint")  # PostgreSQL lists a constraint's index too
        }
    finally:
        engine.dispose()
    index = found.get("uq_caravel_jobs_idempotency")
    if index is None:
        return None
    options = index.get("dialect_options", {})
    where = options.get("postgresql_where", options.get("sqlite_where"))
    predicate = str(where).strip("()") if where is not None else ""
    columns = tuple(str(c) for c in index["column_names"])
    return bool(index["unique"]), columns, predicate


def _unique_constraints(url: str) -> list[tuple[str, ...]]:
    engine = sync_engine(url)
    try:
        constraints = sa.inspect(engine).get_unique_constraints(JOBS)
    finally:
        engine.dispose()
    return [tuple(c["column_names"]) for c in constraints]


def _old_row(url: str, amount: int, key: str | None) -> UUID:
    """Insert a ready ``Add(amount)`` job with the columns every revision has; its id."""
    job_id = uuid4()
    stored_id = str(job_id) if url.startswith("postgresql") else job_id.hex
    key_sql = "NULL" if key is None else f"'{key}'"
    execute_sql(
        url,
        f"INSERT INTO {JOBS} (id, queue, job_type, tenant_id, idempotency_key, payload, state,"
        " attempt, max_attempts, due_at, available_at, lease_token, created_at, updated_at)"
        f" VALUES ('{stored_id}', 'default', 'tests.add.v1', 'tenant-a', {key_sql},"
        f' \'{{"amount":{amount},"note":""}}\', \'ready\', 0, 3, 1, 1, 0, 1, 1)',
    )
    return job_id


async def test_upgrade_to_0004_keeps_jobs_and_still_settles_repeated_keys(empty_url: str) -> None:
    skip_before_mariadb(empty_url, "0004")
    migrate.upgrade(empty_url, "0003")
    assert _idempotency_index(empty_url) is None
    assert _unique_constraints(empty_url) == [("queue", "tenant_id", "idempotency_key")]
    # Rows as the code of revision 0003 wrote them (today's code writes today's columns).
    keyed = _old_row(empty_url, 1, "order-1")
    keyless = [_old_row(empty_url, n, None) for n in (2, 3)]

    migrate.upgrade(empty_url)

    assert _idempotency_index(empty_url) == IDEMPOTENCY_INDEX
    assert _unique_constraints(empty_url) == []
    assert _autogenerate_is_empty(empty_url)
    async with open_queue(empty_url) as queue:
        again = await queue.enqueue(Add(1), dispatch("order-1"))
        assert again.already_enqueued
        assert again.job_id == keyed
        other_tenant = await queue.enqueue(Add(1), dispatch("order-1", tenant="tenant-b"))
        assert not other_tenant.already_enqueued
        more = await queue.enqueue(Add(4), dispatch())
        assert not more.already_enqueued
        for job_id in (keyed, *keyless):
            assert await queue.get_status(job_id, "default", "tenant-a") is not None
    assert _rows(empty_url, f"SELECT COUNT(*) FROM {JOBS}") == [(5,)]


async def test_a_repeated_key_written_behind_the_queue_is_refused_by_the_index(
    empty_url: str,
) -> None:
    migrate.upgrade(empty_url)
    async with open_queue(empty_url) as queue:
        first = await queue.enqueue(Add(1), dispatch("dup"))
    copy = (
        f"INSERT INTO {JOBS} (id, queue, job_type, tenant_id, idempotency_key, payload, state,"
        " attempt, max_attempts, due_at, available_at, lease_token, created_at, updated_at)"
        " SELECT {id}, queue, job_type, tenant_id, {key}, payload, state, attempt,"
        f" max_attempts, due_at, available_at, lease_token, created_at, updated_at FROM {JOBS}"
    )
    fresh_id = {
        "postgresql": "gen_random_uuid()",
        "mariadb": "UUID()",
        "sqlite": "lower(hex(randomblob(16)))",
    }[make_url(empty_url).get_backend_name()]
    with pytest.raises(sa.exc.IntegrityError):
        execute_sql(empty_url, copy.format(id=fresh_id, key="idempotency_key"))
    execute_sql(empty_url, copy.format(id=fresh_id, key="NULL"))  # any number without a key
    execute_sql(empty_url, copy.format(id=fresh_id, key="NULL"))
    assert _rows(empty_url, f"SELECT COUNT(*) FROM {JOBS} WHERE idempotency_key IS NULL") == [(3,)]
    assert first.already_enqueued is False


def test_downgrade_from_0004_restores_the_unique_constraint(empty_url: str) -> None:
    skip_before_mariadb(empty_url, "0004")
    migrate.upgrade(empty_url)
    migrate.downgrade(empty_url, "0003")
    assert _idempotency_index(empty_url) is None
    assert _unique_constraints(empty_url) == [("queue", "tenant_id", "idempotency_key")]
    migrate.upgrade(empty_url)
    assert _idempotency_index(empty_url) == IDEMPOTENCY_INDEX


# ----- downgrade ---------------------------------------------------------------------------


async def test_downgrade_to_base_removes_the_jobs_and_upgrade_works_again(
    empty_url: str,
) -> None:
    migrate.upgrade(empty_url)
    async with open_queue(empty_url) as queue:
        await queue.enqueue(Add(1), dispatch("before"))

    with pytest.raises(DowngradeRefusedError, match="would delete 1 job;"):
        migrate.downgrade(empty_url, "base")
    assert JOBS in _tables(empty_url)
    report = migrate.downgrade(empty_url, "base", force=True)
    # On MariaDB base is one step, 0016's, which takes every job.
    kind = "all_jobs" if is_mariadb(empty_url) else "jobs"
    assert [(loss.kind, loss.rows) for loss in report.losses] == [(kind, 1)]

    assert JOBS not in _tables(empty_url)
    assert migrate.current(empty_url) is None
    with pytest.raises(SchemaNotReadyError):
        migrate.check(empty_url)

    migrate.upgrade(empty_url)

    assert JOBS in _tables(empty_url)
    assert migrate.check(empty_url).current == migrate.head()
    assert _rows(empty_url, f"SELECT COUNT(*) FROM {JOBS}") == [(0,)]  # the old job is gone
    async with open_queue(empty_url) as queue:
        result = await queue.enqueue(Add(1), dispatch("before"))
        assert result.already_enqueued is False


# ----- the application's own tables --------------------------------------------------------

APP_SETUP = (
    "CREATE TABLE app_orders (id INTEGER PRIMARY KEY, note VARCHAR(50) NOT NULL)",
    "CREATE INDEX ix_app_orders_note ON app_orders (note)",
    "INSERT INTO app_orders (id, note) VALUES (1, 'keep me')",
    # The application's own Alembic history, in Alembic's default version table.
    "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)",
    "INSERT INTO alembic_version (version_num) VALUES ('app_rev_42')",
)


def _assert_app_untouched(url: str) -> None:
    assert {"app_orders", "alembic_version"} <= _tables(url)
    assert _rows(url, "SELECT id, note FROM app_orders") == [(1, "keep me")]
    assert _rows(url, "SELECT version_num FROM alembic_version") == [("app_rev_42",)]
    engine = sync_engine(url)
    try:
        indexes = {index["name"] for index in sa.inspect(engine).get_indexes("app_orders")}
    finally:
        engine.dispose()
    assert "ix_app_orders_note" in indexes


def test_application_tables_are_ignored_and_untouched(empty_url: str) -> None:
    execute_sql(empty_url, *APP_SETUP)
    assert migrate.current(empty_url) is None  # the application's history is not ours

    migrate.upgrade(empty_url)
    _assert_app_untouched(empty_url)
    report = migrate.check(empty_url)
    assert report.differences == ()
    assert _autogenerate_is_empty(empty_url)

    migrate.downgrade(empty_url, "base")
    _assert_app_untouched(empty_url)
    assert JOBS not in _tables(empty_url)

    migrate.upgrade(empty_url)
    _assert_app_untouched(empty_url)
    assert migrate.check(empty_url).current == migrate.head()


# ----- a queue against a database nobody migrated ------------------------------------------


async def test_enqueue_on_an_unmigrated_database_says_to_run_upgrade(empty_url: str) -> None:
    async with open_queue(empty_url) as queue:
        with pytest.raises(SchemaNotReadyError) as caught:
            await queue.enqueue(Add(1), dispatch("k"))
    assert UPGRADE_HINT in str(caught.value)
    assert JOBS not in _tables(empty_url)  # the library never creates its tables itself


async def test_claim_on_an_unmigrated_database_says_to_run_upgrade(empty_url: str) -> None:
    async with open_queue(empty_url) as queue:
        with pytest.raises(SchemaNotReadyError) as caught:
            await Leases(queue).claim("default")
    assert UPGRADE_HINT in str(caught.value)


async def test_get_status_on_an_unmigrated_database_says_to_run_upgrade(empty_url: str) -> None:
    job_id = "01890000-0000-7000-8000-000000000000"
    async with open_queue(empty_url) as queue:
        with pytest.raises(SchemaNotReadyError) as caught:
            await queue.get_status(job_id, "default", "tenant-a")
    assert UPGRADE_HINT in str(caught.value)


async def test_check_schema_on_an_empty_database(empty_url: str) -> None:
    queue = DatabaseQueue(empty_url, make_registry())
    try:
        with pytest.raises(SchemaNotReadyError) as caught:
            await queue.check_schema()
        assert UPGRADE_HINT in str(caught.value)
    finally:
        await queue.close()


async def test_check_schema_follows_the_applied_revision(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    queue = DatabaseQueue(empty_url, make_registry())
    try:
        await queue.check_schema()

        execute_sql(empty_url, f"UPDATE {VERSION} SET version_num = 'ffff'")
        with pytest.raises(SchemaNotReadyError) as caught:
            await queue.check_schema()
        assert "ffff" in str(caught.value)

        execute_sql(empty_url, f"UPDATE {VERSION} SET version_num = '{migrate.head()}'")
        await queue.check_schema()

        migrate.downgrade(empty_url, "base")
        with pytest.raises(SchemaNotReadyError) as caught:
            await queue.check_schema()
        assert UPGRADE_HINT in str(caught.value)
    finally:
        await queue.close()


def test_a_mariadb_upgrade_that_stopped_half_way_finishes_when_run_again(empty_url: str) -> None:
    if not is_mariadb(empty_url):
        pytest.skip("only MariaDB commits DDL as it goes")
    migrate.upgrade(empty_url, "0015")  # nothing on MariaDB: the version table alone
    # As after 0016 was cut off once its tables were made: no trigger, the revision unchanged.
    migrate.upgrade(empty_url)
    execute_sql(
        empty_url,
        "DROP TRIGGER caravel_jobs_release",
        "DROP TABLE caravel_attempts",
        f"UPDATE {VERSION} SET version_num = '0015'",
    )
    assert migrate.current(empty_url) == "0015"

    migrate.upgrade(empty_url)

    assert migrate.check(empty_url).current == migrate.head()
    triggers = _rows(
        empty_url,
        "SELECT trigger_name FROM information_schema.triggers WHERE trigger_schema = DATABASE()",
    )
    assert sorted(triggers) == [("caravel_jobs_release",), ("caravel_jobs_workflow_release",)]
