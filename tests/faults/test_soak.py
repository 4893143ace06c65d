"""The soak's short profile of its ``effects`` scenario (the long one is ``make soak``; its
``limits``, ``rate`` and ``combined`` scenarios run in the suite as ``test_limits_faults.py``): a
seeded schedule of SIGKILL, SIGSTOP/SIGCONT and (PostgreSQL, MariaDB) connection resets over
three worker processes while a client enqueues over a thousand jobs, 10% of handler runs
failing at random; the checker must pass and the figures must show the faults really
happened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults.soak import Profile, run_soak

pytestmark = [pytest.mark.slow, pytest.mark.serial]


def test_short_soak(db_url: str, app_url: str, logs: Path, backend: str) -> None:
    report, supervisor, client = run_soak(
        db_url, app_url, logs, Profile(duration=15.0, seed=11, rate=75.0, at_least=2)
    )
    print(json.dumps({"backend": backend, **report}))
    assert client.errors == []
    assert report["jobs"] >= 1000
    assert report["jobs"] == report["acknowledged"]
    assert report["kills"] >= 2
    assert report["stops"] >= 2
    # Every exit while supervised was one of our kills, or (through the proxy) a worker whose
    # connection we reset stopping with exit code 1 for its supervisor: nothing else.
    exits = report["worker_exits"]
    assert exits[-9] == report["kills"] == supervisor.killed()
    if backend != "sqlite":
        assert report["resets"] >= 2
        assert set(exits) <= {-9, 1}
    else:
        assert report["resets"] == 0
        assert set(exits) == {-9}
    assert report["restarts"] == sum(exits.values())
    # 10% of runs fail: failures happened, were retried, and only the unlucky few (three
    # failures in a row) or the jobs whose every claim was killed became dead letters.
    assert report["handler_failures"] >= report["jobs"] * 0.05
    assert set(report["dead_by_category"]) <= {"HandlerFailed", "LeaseExpired"}
    assert report["dead_letter"] <= report["jobs"] * 0.01
    assert report["reruns"] >= report["handler_failures"]
