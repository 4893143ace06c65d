"""``caravel worker`` and ``caravel outbox relay`` flags through the real command: a number out of
range is one line naming the flag the operator typed (never the library's field), exit 2, no
traceback; ``--log-level`` joins ``--verbose``; ``--max-attempts`` is gone with a reason."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.acceptance.test_outbox_relay_process import Databases, run_relay
from tests.acceptance.test_worker_process import QUEUE, completed, enqueue, statuses
from tests.support.apps.workload import Nap, Refuse
from tests.support.processes import WorkerProcess, run_cli, wait_until

pytestmark = pytest.mark.slow

APP = "tests.support.apps.workload:registry"


def worker(url: str, *extra: str) -> tuple[int, list[str]]:
    done = run_cli("worker", "--url", url, "--app", APP, "--queue", QUEUE, *extra)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stderr.splitlines()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--lease-duration", "0.5"], "--lease-duration must be from 1 second to 1 hour"),
        (
            ["--lease-renewal-interval", "200"],
            "--lease-renewal-interval must be at least 100 milliseconds and at most half of "
            "--lease-duration",
        ),
        (
            ["--max-lease-lifetime", "10"],
            "--max-lease-lifetime must be from --lease-duration to 7 days",
        ),
        (["--concurrency", "0"], "--concurrency must be an integer from 1 to 1024"),
        (
            ["--poll-interval", "0.001"],
            "--poll-interval must be from 10 milliseconds to 60 seconds",
        ),
        (["--shutdown-grace", "-1"], "--shutdown-grace must be from 0 to 1 hour"),
        (["--outage-window", "3601"], "--outage-window must be from 0 to 1 hour"),
        (["--heartbeat-interval", "0"], "--heartbeat-interval must be from 1 second to 5 minutes"),
        (
            ["--summary-interval", "0.5"],
            "--summary-interval must be from 1 second to 1 hour, or off (None)",
        ),
        (["--lease-duration", "nan"], "--lease-duration must be a finite number of seconds"),
        (["--poll-interval", "1e300"], "--poll-interval is too large"),
        (["--log-level", "loud"], "--log-level must be one of debug, info, warning, error"),
        (
            ["--completed", "7 days"],
            "--completed must be a whole number with an optional unit s, m, h or d",
        ),
        (["--dead-letter", "0"], "--dead-letter must be from 1 second to 100 years (or None)"),
        (
            ["--keys", "30d", "--prune-interval", "5s"],
            "--prune-interval must be from 1 minute to 1 day",
        ),
        (
            ["--prune-interval", "1h"],
            "--prune-interval needs an age to prune by: --completed, --cancelled, "
            "--dead-letter or --keys",
        ),
        (
            ["--log-level", "warning", "--verbose"],
            "--verbose means --log-level debug; give one or the other, not warning",
        ),
    ],
)
def test_worker_flag_errors_name_the_flag(
    sqlite_template: object, tmp_path: Path, flags: list[str], said: str
) -> None:
    url = f"sqlite:///{tmp_path / 'absent.db'}"  # refused before any database is opened
    code, lines = worker(url, *flags)
    assert (code, lines) == (2, [f"caravel worker: {said}"])


@pytest.mark.parametrize(
    ("redactor", "said"),
    [
        ("redact", "--redactor must look like package.module:function"),
        (
            "tests.support.apps.workload:nothing",
            "--redactor module 'tests.support.apps.workload' has no attribute 'nothing'",
        ),
        (
            "tests.support.apps.workload:registry",
            "--redactor must be a function taking the exception and returning a string or None",
        ),
    ],
)
def test_a_redactor_that_is_not_a_function_is_refused_by_its_flag(
    tmp_path: Path, redactor: str, said: str
) -> None:
    code, lines = worker(f"sqlite:///{tmp_path / 'absent.db'}", "--redactor", redactor)
    assert (code, lines) == (2, [f"caravel worker: {said}"])


def test_a_worker_s_redactor_and_a_handler_s_safe_detail_are_logged_never_the_message(
    db_url: str, tmp_path: Path
) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    secret = "zq-secret-refusal-31c7"
    ids = enqueue(db_url, Refuse(secret), Refuse(secret, marked=True))
    process = WorkerProcess(
        db_url,
        evidence,
        [QUEUE],
        "--redactor",
        "tests.support.apps.workload:redact",
        "--poll-interval",
        "0.05",
    )
    try:
        wait_until(
            lambda: all(s.attempt >= 1 and s.last_failure for s in statuses(db_url, ids)),
            what="both jobs to fail once",
        )
        process.signal(signal.SIGTERM)
        code, err = process.wait()
    finally:
        process.kill()
    assert code == 0, err
    assert 'detail="the provider did not answer in time"' in err
    assert 'detail="provider answered 503"' in err
    assert secret not in err


def test_worker_max_attempts_is_refused_with_where_the_budget_is_set(tmp_path: Path) -> None:
    code, lines = worker(f"sqlite:///{tmp_path / 'absent.db'}", "--max-attempts", "5")
    assert code == 2
    (line,) = lines
    assert line.startswith("caravel worker: --max-attempts is gone")
    assert "DispatchOptions.max_attempts" in line
    assert "--max-attempts" not in run_cli("worker", "--help").stdout


@pytest.mark.parametrize(("level", "shown"), [("debug", True), ("info", False)])
def test_worker_log_level_sets_what_is_logged(
    db_url: str, tmp_path: Path, level: str, shown: bool
) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    ids = enqueue(db_url, Nap(0))
    process = WorkerProcess(
        db_url, evidence, [QUEUE], "--log-level", level.upper(), "--poll-interval", "0.05"
    )
    try:
        wait_until(lambda: completed(db_url, ids), what="the job to complete")
        process.signal(signal.SIGTERM)
        code, err = process.wait()
    finally:
        process.kill()
    assert code == 0, err
    assert ("DEBUG caravel.worker: job completed" in err) is shown, err


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--batch-size", "0"], "--batch-size must be an integer from 1 to 1000"),
        (["--poll-interval", "0"], "--poll-interval must be from 10 milliseconds to 1 hour"),
        (["--poll-interval", "inf"], "--poll-interval must be a finite number of seconds"),
        (["--log-level", "chatty"], "--log-level must be one of debug, info, warning, error"),
    ],
)
def test_relay_flag_errors_name_the_flag(
    sqlite_template: object, tmp_path: Path, flags: list[str], said: str
) -> None:
    from tests.support.databases import SqliteTemplate

    assert isinstance(sqlite_template, SqliteTemplate)
    queue_url = sqlite_template.copy_to(tmp_path / "queue.db")
    done = run_relay(Databases(queue_url, f"sqlite:///{tmp_path / 'app.db'}"), "--once", *flags)
    assert "Traceback" not in done.stderr, done.stderr
    assert (done.returncode, done.stderr.splitlines()) == (2, [f"caravel outbox relay: {said}"])
