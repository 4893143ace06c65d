"""The fault harness itself: what the crash tests count must not depend on timing."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, cast
from uuid import uuid4

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql

from caravel.jobs import FailureCategory, Lease
from caravel.store import queries
from caravel.store.mariadb.execution import _emulated
from caravel.store.postgresql.attempts import recording
from caravel.store.schema import jobs
from caravel.store.values import FailedAttempt
from tests.faults.harness import Supervisor, wait_until
from tests.faults.proxy import _MysqlBackend, _MysqlFrontend, statement_kind


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_kill_just_before_stopping_counts_as_a_crash(
    db_url: str, app_url: str, logs: Path
) -> None:
    # The supervisor looks at its workers every 50 ms; stopping right after a SIGKILL must not
    # count the killed worker's exit as one that stopping caused.
    with Supervisor(db_url, app_url, logs, workers=2, concurrency=2) as supervisor:
        wait_until(
            lambda: sum("processing" in w.log() for w in supervisor.alive()) == 2,
            what="two workers to start",
        )
        victim = supervisor.alive()[0]
        supervisor.signal(victim, signal.SIGKILL)
    crashes = supervisor.crashes()
    assert [(c.pid, c.returncode) for c in crashes] == [(victim.pid, -signal.SIGKILL)]
    assert sorted(e.at_stop for e in supervisor.exits) == [False, True]


@pytest.mark.parametrize("trimming", [False, True])
def test_the_proxy_knows_an_outcome_that_writes_its_attempt_record(trimming: bool) -> None:
    # PostgreSQL's outcomes record their attempt in a data-modifying WITH around the UPDATE; a
    # proxy that only knew the bare UPDATE never fired its complete or fail trigger.
    held = jobs.c.id == sa.bindparam("b_id")
    lease = Lease(
        job_id=uuid4(), token=1, expires_at_ms=2, claimed_at_ms=1, attempt=1, max_attempts=3
    )
    failure = FailedAttempt(lease, FailureCategory.HANDLER_FAILED.value, retry_at=5)
    kinds = {
        name: statement_kind(_postgres_text(recording(update, trimming=trimming)))
        for name, update in {
            "complete": queries.complete(held),
            "fail": queries.fail(held, failure, 1),
        }.items()
    }
    assert kinds == {"complete": "complete", "fail": "fail"}


def _postgres_text(statement: object) -> str:
    return str(cast(Any, statement).compile(dialect=postgresql.dialect()))


def test_the_proxy_knows_a_mariadb_renewal_and_completion() -> None:
    # MariaDB runs an UPDATE ... RETURNING as a locking read, the UPDATE and a read: the proxy
    # names a renewal by its locking read (the UPDATE is by id) and a completion by its UPDATE.
    held = jobs.c.id == sa.bindparam("b_id")
    renewal = _emulated(queries.renew(held, 1, 2))
    completion = _emulated(queries.complete(held))
    assert statement_kind(_mariadb_text(renewal.lock)) == "renew"
    assert statement_kind(_mariadb_text(renewal.update)) == "other"
    assert statement_kind(_mariadb_text(completion.update)) == "complete"


@pytest.mark.parametrize("deprecate_eof", [False, True])
def test_the_proxy_follows_mariadb_replies(deprecate_eof: bool) -> None:
    """Each command's reply ends once, with the transaction status it leaves: an OK packet, or
    the EOF (or, with ``CLIENT_DEPRECATE_EOF``, the OK) that ends a result set."""
    frontend = _MysqlFrontend()
    backend = _MysqlBackend(frontend)
    flags = 0x0200 | (0x01000000 if deprecate_eof else 0)  # PROTOCOL_41 (| DEPRECATE_EOF)
    assert backend.feed(_packet(0, b"\x0a11.0.0-MariaDB\x00")) == []  # the server's greeting
    assert frontend.feed(_packet(1, flags.to_bytes(4, "little") + bytes(28))) == []
    assert backend.feed(_packet(2, b"\x00\x00\x00\x02\x00\x00\x00")) == []  # authenticated

    update = b"UPDATE caravel_jobs SET state='completed' WHERE id = 1"
    assert frontend.feed(_packet(0, b"\x03" + update)) == [("Q", update.decode())]
    assert backend.feed(_packet(1, b"\x00\x01\x00\x01\x00\x00\x00")) == ["ZT"]  # OK, in trans
    assert backend.autocommit is False

    frontend.feed(_packet(0, b"\x03SELECT 1"))
    columns = _packet(1, b"\x01") + _packet(2, b"def\x00column")
    # The result set's end, still in the transaction: an OK (0xFE; affected rows, insert id,
    # status, warnings), or an EOF (warnings, status).
    end = b"\xfe\x00\x00\x01\x00\x00\x00" if deprecate_eof else b"\xfe\x00\x00\x01\x00"
    rows = _packet(3, b"\x011") + _packet(4, b"\x00")  # a row "1", a row ""
    if not deprecate_eof:
        columns += _packet(3, b"\xfe\x00\x00\x01\x00")  # the EOF after the columns
    whole = columns + rows + _packet(5, end)
    # Split anywhere: nothing ends before the last byte.
    assert backend.feed(whole[:7]) == []
    assert backend.feed(whole[7:-1]) == []
    assert backend.feed(whole[-1:]) == ["ZT"]

    frontend.feed(_packet(0, b"\x03COMMIT"))
    assert backend.feed(_packet(1, b"\x00\x00\x00\x00\x00\x00\x00")) == ["ZI"]  # it is over
    assert backend.feed(_packet(1, b"\x00")) == []  # no command: not followed


def _packet(sequence: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([sequence]) + payload


def _mariadb_text(statement: object) -> str:
    return str(cast(Any, statement).compile(dialect=mysql.dialect()))
