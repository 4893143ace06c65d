"""The soak's short profile (the long one is ``make soak``): a seeded schedule of SIGKILL and
SIGSTOP/SIGCONT over three worker processes while a client enqueues over a thousand jobs, 10% of
handler runs failing at random; the checker must pass and the figures must show the faults
really happened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults.soak import Profile, run_soak

pytestmark = pytest.mark.slow


def test_short_soak(db_url: str, app_url: str, logs: Path, backend: str) -> None:
    report, supervisor, client = run_soak(
        db_url, app_url, logs, Profile(duration=15.0, seed=11, rate=75.0)
    )
    print(json.dumps({"backend": backend, **report}))
    assert client.errors == []
    assert report["jobs"] >= 1000
    assert report["jobs"] == report["acknowledged"]
    assert report["kills"] >= 3
    assert report["stops"] >= 3
    # Every exit while supervised was one of our kills: no worker stopped on a database error.
    assert set(report["worker_exits"]) == {-9}
    assert report["restarts"] == report["kills"] == supervisor.killed()
    # 10% of runs fail: failures happened, were retried, and only the unlucky few (three
    # failures in a row) or the jobs whose every claim was killed became dead letters.
    assert report["handler_failures"] >= report["jobs"] * 0.05
    assert set(report["dead_by_category"]) <= {"HandlerFailed", "LeaseExpired"}
    assert report["dead_letter"] <= report["jobs"] * 0.01
    assert report["reruns"] >= report["handler_failures"]
