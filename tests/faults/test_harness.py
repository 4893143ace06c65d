"""The fault harness itself: what the crash tests count must not depend on timing."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.faults.harness import Supervisor, wait_until


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
