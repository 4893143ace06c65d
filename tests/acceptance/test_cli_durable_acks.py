"""``caravel worker --durable-acks`` reaches the database: the real command, on a real database,
acknowledges with the durability it was told (observed from inside the acknowledgement's own
transaction, ``tests/support/sync_settings.py``)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.acceptance.test_worker_process import FAST, QUEUE, completed, enqueue
from tests.support.apps.workload import Nap
from tests.support.processes import WorkerProcess, wait_until
from tests.support.sync_settings import SETTINGS, seen, watched_url

__all__ = ["watched_url"]  # the fixture

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("durable", [False, True], ids=["default", "durable-acks"])
def test_the_worker_flag_sets_the_acknowledgements_durability(
    watched_url: tuple[str, str], tmp_path: Path, durable: bool
) -> None:
    backend, url = watched_url
    ids = enqueue(url, Nap(0.0))
    seen(url)
    flags = ("--durable-acks",) if durable else ()
    worker = WorkerProcess(url, tmp_path, [QUEUE], *FAST, *flags)
    try:
        wait_until(lambda: completed(url, ids), what="the job to be acknowledged")
        worker.signal(signal.SIGTERM)
        code, err = worker.wait()
        assert code == 0, err
    finally:
        worker.kill()
    observed = set(seen(url))  # claims (durable) and the acknowledgement
    assert SETTINGS[backend][durable] in observed
    if durable:
        assert observed == {SETTINGS[backend][True]}
