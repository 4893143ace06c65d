"""The fault harness itself: what the crash tests count must not depend on timing."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, cast
from uuid import uuid4

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from caravel.jobs import FailureCategory, Lease
from caravel.store import queries
from caravel.store.postgresql.attempts import recording
from caravel.store.schema import jobs
from caravel.store.values import FailedAttempt
from tests.faults.harness import Supervisor, wait_until
from tests.faults.proxy import statement_kind


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
