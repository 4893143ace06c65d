"""A database error names its cause in one line: the operation, and the driver's reason when it
is about the connection or the schema (refused connection with host and port, a database or a
role that does not exist); never a reason that could quote stored values."""

from __future__ import annotations

import socket
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from caravel import QueueInspector, StoreError
from caravel.store.errors import driver_reason
from tests.support.databases import ADMIN_URL


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def _counts_error(url: str) -> StoreError:
    with pytest.raises(StoreError) as caught:
        async with QueueInspector(url) as inspector:
            await inspector.queue_counts()
    return caught.value


@pytest.mark.postgres
async def test_a_refused_connection_names_the_host_and_port() -> None:
    port = _free_port()
    url = make_url(ADMIN_URL).set(host="127.0.0.1", port=port).render_as_string(False)
    error = await _counts_error(url)
    assert str(error).startswith("database error during queue_counts: ")
    assert f"port {port}" in str(error)
    assert "Connection refused" in str(error)
    assert "\n" not in str(error)


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"database": "caravel_no_such_database"}, 'database "caravel_no_such_database" does not'),
        ({"username": "caravel_no_such_role"}, 'role "caravel_no_such_role" does not exist'),
    ],
    ids=["database", "role"],
)
async def test_a_missing_database_or_role_is_named(change: dict[str, str], expected: str) -> None:
    url = make_url(ADMIN_URL).set(**change).render_as_string(False)  # type: ignore[arg-type]
    error = await _counts_error(url)
    assert expected in str(error)
    assert error.reason is not None
    assert error.__cause__ is not None


@pytest.mark.parametrize(
    "error",
    [
        sqlite3.IntegrityError("UNIQUE constraint failed: a secret value"),
        sqlite3.DataError("a secret value is too long"),
    ],
)
def test_a_reason_that_could_quote_stored_values_is_left_out(error: Exception) -> None:
    assert driver_reason(error) is None
    assert "secret" not in str(StoreError("job_insert", driver_reason(error)))


def test_a_reason_is_one_printable_line() -> None:
    error = sqlite3.OperationalError("disk I/O error\nDETAIL:  second line\x07")
    assert driver_reason(error) == "disk I/O error"


async def test_a_missing_sqlite_file_is_named_by_every_entry_point(tmp_path: Path) -> None:
    from caravel import DatabaseNotFoundError, DatabaseQueue, QueueWorker
    from tests.support import Add, dispatch, make_registry

    missing = tmp_path / "missing.db"
    url = f"sqlite:///{missing}"
    async with DatabaseQueue(url, make_registry()) as queue:
        with pytest.raises(DatabaseNotFoundError) as enqueued:
            await queue.enqueue(Add(1), dispatch())
        with pytest.raises(DatabaseNotFoundError):
            await queue.check_schema()
        async with QueueWorker(queue) as worker:
            with pytest.raises(DatabaseNotFoundError):
                await worker.run("default")
    async with QueueInspector(url) as inspector:
        with pytest.raises(DatabaseNotFoundError):
            await inspector.queue_counts()
    assert enqueued.value.path == str(missing)
    assert str(missing) in str(enqueued.value)
    assert "upgrade" not in str(enqueued.value)
    assert not missing.exists()
