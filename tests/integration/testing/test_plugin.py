"""The pytest plugin, run inside pytester: its fixtures give migrated queues on a ManualClock,
the registry fixture says how to provide it, PostgreSQL is skipped or failed as documented, and
an assertion's failure message reaches the test report."""

from __future__ import annotations

import importlib.metadata

import pytest

from caravel.errors import ValidationError
from caravel.store import open_store
from tests.support.databases import ADMIN_URL

pytest_plugins = ["pytester"]

CONFTEST = """
from dataclasses import dataclass

import pytest

from caravel import JobContext, JobRegistry

@dataclass(frozen=True)
class Greet:
    name: str

registry = JobRegistry()
greeted = []

@registry.handles("tests.greet.v1", Greet)
async def greet(job: Greet, ctx: JobContext[None]) -> None:
    greeted.append((job.name, ctx.tenant_id))

@pytest.fixture
def caravel_registry() -> JobRegistry:
    return registry
"""

QUEUE_TEST = """
from datetime import timedelta

from caravel import DispatchOptions, JobState
from caravel.testing import ManualClock, assert_enqueued, drain
from conftest import Greet, greeted

async def test_{name}(caravel_{name}, caravel_clock):
    queue = caravel_{name}
    assert queue.clock is caravel_clock
    assert isinstance(caravel_clock, ManualClock)
    due = caravel_clock.now() + timedelta(seconds=30)
    await queue.enqueue(Greet("ada"), DispatchOptions(queue="hello", not_before=due))
    await assert_enqueued(queue, Greet, payload={{"name": "ada"}}, state=JobState.READY)
    runs = await drain(queue, advance=True)
    assert [r.outcome for r in runs] == ["completed"]
    assert greeted[-1] == ("ada", "default")

async def test_{name}_starts_empty(caravel_{name}):
    assert await drain(caravel_{name}) == []
"""

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""


def plugin_args() -> list[str]:
    """``-p caravel.testing.plugin`` unless the installed entry point already loads it."""
    names = {ep.name for ep in importlib.metadata.entry_points(group="pytest11")}
    return [] if "caravel" in names else ["-p", "caravel.testing.plugin"]


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("CARAVEL_TEST_POSTGRES_URL", raising=False)
    monkeypatch.delenv("CI", raising=False)
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    return pytester


def run(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return project.runpytest_inprocess(*plugin_args(), "-p", "no:cacheprovider", *args)


@pytest.mark.parametrize("name", ["sqlite_queue", "queue"])
def test_the_sqlite_queue_fixtures_give_a_fresh_migrated_queue(
    project: pytest.Pytester, name: str
) -> None:
    project.makepyfile(QUEUE_TEST.format(name=name))
    run(project).assert_outcomes(passed=2)


def test_the_postgres_queue_runs_on_a_throwaway_database_of_the_given_server(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(QUEUE_TEST.format(name="postgres_queue"))
    result = run(project, f"--caravel-postgres-url={ADMIN_URL}")
    result.assert_outcomes(passed=2)


def test_the_postgres_queue_takes_its_url_from_the_environment(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CARAVEL_TEST_POSTGRES_URL", ADMIN_URL)
    project.makepyfile(QUEUE_TEST.format(name="postgres_queue"))
    run(project).assert_outcomes(passed=2)


def test_the_postgres_queue_is_skipped_with_the_reason_without_a_url(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(QUEUE_TEST.format(name="postgres_queue"))
    result = run(project, "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*no PostgreSQL server: pass --caravel-postgres-url*"])


UNREACHABLE = "postgresql://root@127.0.0.1:1/test"


def test_an_unreachable_server_skips_outside_ci(project: pytest.Pytester) -> None:
    project.makepyfile(QUEUE_TEST.format(name="postgres_queue"))
    result = run(project, f"--caravel-postgres-url={UNREACHABLE}", "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*PostgreSQL at the given URL is not reachable*"])


def test_an_unreachable_server_fails_in_ci(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    project.makepyfile(QUEUE_TEST.format(name="postgres_queue"))
    result = run(project, f"--caravel-postgres-url={UNREACHABLE}")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*PostgreSQL at the given URL is not reachable*"])


def _memory_store_missing() -> bool:
    try:
        open_store("memory://")
    except ValidationError:
        return True
    return False


@pytest.mark.skipif(_memory_store_missing(), reason="memory store not merged")
def test_the_memory_queue_fixture(project: pytest.Pytester) -> None:
    project.makepyfile(QUEUE_TEST.format(name="memory_queue"))
    run(project).assert_outcomes(passed=2)


def test_without_a_registry_fixture_the_test_fails_saying_what_to_define(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(
        """
        async def test_needs_a_queue(caravel_queue):
            pass
        """
    )
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*caravel_registry: define a caravel_registry fixture in your conftest.py*"]
    )


def test_an_assertion_failure_shows_what_was_enqueued(project: pytest.Pytester) -> None:
    project.makepyfile(
        """
        from caravel import DispatchOptions
        from caravel.testing import assert_enqueued
        from conftest import Greet

        async def test_wrong_name(caravel_queue):
            await caravel_queue.enqueue(Greet("bob"), DispatchOptions(queue="hello"))
            await assert_enqueued(caravel_queue, Greet, payload={"name": "ada"})
        """
    )
    result = run(project)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: expected a job 'tests.greet.v1' payload containing"
            ' {"name":"ada"}, found none; enqueued were (1):',
            '*- tests.greet.v1 queue=hello tenant=default state=ready due=* payload={"name":"bob"}',
        ]
    )


def test_the_fixtures_are_listed_with_their_help(project: pytest.Pytester) -> None:
    result = run(project, "--fixtures")
    result.stdout.fnmatch_lines(["*caravel_sqlite_queue*", "*caravel_postgres_url*"])


def test_the_immediate_queue_fixture_runs_jobs_inside_enqueue(project: pytest.Pytester) -> None:
    project.makepyfile(
        """
        from caravel import DispatchOptions
        from caravel.testing import ImmediateQueue
        from conftest import Greet, greeted

        async def test_immediate(caravel_immediate_queue, caravel_clock):
            assert isinstance(caravel_immediate_queue, ImmediateQueue)
            assert caravel_immediate_queue.clock is caravel_clock
            await caravel_immediate_queue.enqueue(Greet("eve"), DispatchOptions(queue="hi"))
            assert greeted[-1] == ("eve", "default")
        """
    )
    run(project).assert_outcomes(passed=1)


def test_the_sync_queue_fixture_serves_plain_synchronous_tests(project: pytest.Pytester) -> None:
    project.makepyfile(
        """
        from caravel import DispatchOptions, SyncQueue
        from caravel.testing import assert_enqueued, drain
        from conftest import Greet, greeted

        def test_sync(caravel_sync_queue, caravel_clock):
            assert isinstance(caravel_sync_queue, SyncQueue)
            assert caravel_sync_queue.queue.clock is caravel_clock
            caravel_sync_queue.enqueue(Greet("kim"), DispatchOptions(queue="hi"))
            assert_enqueued(caravel_sync_queue, Greet, payload={"name": "kim"})
            assert [run.outcome for run in drain(caravel_sync_queue)] == ["completed"]
            assert greeted[-1] == ("kim", "default")
        """
    )
    run(project).assert_outcomes(passed=1)
