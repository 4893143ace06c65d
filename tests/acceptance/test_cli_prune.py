"""``caravel jobs prune`` as an operator runs it, on a real SQLite file: counts first and asks,
prunes only what is old enough, keeps a keyed job's duplicate protection, refuses bad ages; and
``caravel worker`` with the same age flags, pruning on its schedule."""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from caravel import JobState, Leases
from caravel.testing import ManualClock
from tests.support import Add, dispatch, open_queue, status_of
from tests.support.databases import SqliteTemplate
from tests.support.processes import WorkerProcess, run_cli, wait_until

pytestmark = pytest.mark.slow  # the console script, in subprocesses


async def _seed(url: str) -> list[object]:
    """Two jobs completed ten days ago (one keyed) and one completed now."""
    made = []
    now = datetime.now(UTC)
    for when, key in ((now - timedelta(days=10), "k1"), (now - timedelta(days=10), None),
                      (now, "k2")):  # fmt: skip
        async with open_queue(url, clock=ManualClock(when)) as queue:
            made.append((await queue.enqueue(Add(len(made)), dispatch(key))).job_id)
            claimed = await Leases(queue).claim("default")
            assert claimed is not None
            await Leases(queue).complete(claimed.lease)
    return made


@pytest.fixture
def seeded(tmp_path: Path, sqlite_template: SqliteTemplate) -> tuple[str, list[object]]:
    url = sqlite_template.copy_to(tmp_path / "queue.db")
    return url, asyncio.run(_seed(url))


def test_prune_asks_then_prunes_only_old_jobs_and_keeps_their_keys(
    seeded: tuple[str, list[object]],
) -> None:
    url, (keyed, keyless, young) = seeded
    declined = run_cli("jobs", "prune", "--url", url, "--completed", "7d", env={}, timeout=60)
    assert declined.returncode == 1  # no terminal to answer: not confirmed
    assert "Prune 2 jobs (1 deleted, 1 kept as tombstones)" in declined.stderr

    done = run_cli("jobs", "prune", "--url", url, "--completed", "7d", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "pruned 2 jobs (1 deleted, 1 kept as tombstones); 0 expired tombstones"
    )

    async def check() -> None:
        async with open_queue(url) as queue:
            assert (await status_of(queue, keyed)).state is JobState.PRUNED  # type: ignore[arg-type]
            assert (await status_of(queue, young)).state is JobState.COMPLETED  # type: ignore[arg-type]
            assert await queue.get_status(keyless, "default", "tenant-a") is None  # type: ignore[arg-type]
            again = await queue.enqueue(Add(0), dispatch("k1"))
            assert (again.job_id, again.already_enqueued) == (keyed, True)

    asyncio.run(check())
    shown = run_cli(
        "jobs", "show", "--json", str(keyed), "--url", url, "-q", "default", "-t", "tenant-a"
    )
    assert json.loads(shown.stdout)["state"] == "pruned"


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        ((), "ages"),
        (("--completed", "7 days"), "--completed"),
        (("--dead-letter", "0"), "--dead-letter"),
        (("--keys", "30d", "--limit", "0"), "--limit"),
    ],
)
def test_bad_ages_exit_2_naming_the_flag(seeded: tuple[str, list[object]], args: tuple[str, ...],
                                          flag: str) -> None:  # fmt: skip
    url, _ = seeded
    done = run_cli("jobs", "prune", "--url", url, *args, "--yes", "--json")
    assert done.returncode == 2
    error = json.loads(done.stderr)["error"]
    assert error["type"] in ("ValidationError", "OptionsError")
    assert f"{flag}:" in error["message"] or f"{flag} " in error["message"]


def test_a_worker_given_an_age_prunes_on_its_schedule(
    seeded: tuple[str, list[object]], tmp_path: Path
) -> None:
    """The shortest interval the library takes is a minute, and a worker's first round comes one
    interval after it starts (the CLI has no clock to inject): this test waits that minute."""
    url, (keyed, keyless, young) = seeded

    async def states() -> list[JobState | None]:
        async with open_queue(url) as queue:
            found = [await queue.get_status(job, "default", "tenant-a") for job in made]  # type: ignore[arg-type]
        return [None if status is None else status.state for status in found]

    made = (keyed, keyless, young)
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    worker = WorkerProcess(
        url, evidence, ["naps"], "--completed", "7d", "--keys", "30d", "--prune-interval", "1m"
    )
    try:
        wait_until(
            lambda: asyncio.run(states())[:2] == [JobState.PRUNED, None],
            timeout=150,
            what="the worker's first prune round",
        )
        worker.signal(signal.SIGTERM)
        code, err = worker.wait()
    finally:
        worker.kill()
    assert code == 0, err
    assert asyncio.run(states())[2] is JobState.COMPLETED, "a job younger than 7d was pruned"
    assert "prunes finished jobs every 1 min; SIGTERM or Ctrl+C stops" in err
    assert "pruned 2 jobs (1 tombstones kept, 0 expired tombstones deleted)" in err
