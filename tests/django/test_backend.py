"""Django's documented behaviours of the Tasks API, against CaravelBackend, on SQLite and
PostgreSQL: enqueue, results, return values, defer, priority, context, validation, signals,
async enqueue. The worker is ours, run in this process by caravel.testing.drain."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from caravel.testing import drain


def backend(alias: str) -> Any:
    from caravel.contrib.django.compat import task_backends

    return task_backends[alias]


def work(alias: str) -> list[Any]:
    return drain(backend(alias).queue())


def test_the_backend_says_what_it_supports(alias: str) -> None:
    b = backend(alias)
    assert (b.supports_defer, b.supports_async_task, b.supports_get_result) == (True,) * 3
    assert b.supports_priority is True


def test_enqueue_returns_a_ready_result_and_the_worker_runs_it(alias: str, tasks: Any) -> None:
    from caravel.contrib.django.compat import TaskResultStatus

    result = tasks.add.using(backend=alias).enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert result.args == [2, 3]
    assert result.kwargs == {}
    assert result.backend == alias
    assert result.enqueued_at is not None
    assert not result.is_finished
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value

    runs = work(alias)
    assert [run.outcome for run in runs] == ["completed"]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.is_finished
    assert result.attempts == 1
    assert result.started_at is not None
    assert result.finished_at is not None
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.errors == []


def test_get_result_reads_the_stored_state(alias: str, tasks: Any) -> None:
    from caravel.contrib.django.compat import TaskResultStatus

    task = tasks.send_email.using(backend=alias)
    enqueued = task.enqueue("a@example.com", subject="hi")
    assert task.get_result(enqueued.id).status == TaskResultStatus.READY
    work(alias)
    found = task.get_result(enqueued.id)
    assert found.id == enqueued.id
    assert found.status == TaskResultStatus.SUCCESSFUL
    assert found.return_value == {"to": "a@example.com", "subject": "hi"}
    assert found.args == ["a@example.com"]
    assert found.kwargs == {"subject": "hi"}
    assert found.task.func is tasks.send_email.func
    assert tasks.SEEN == [("send_email", "a@example.com", "hi")]


def test_a_result_of_another_task_or_an_unknown_id_is_refused(alias: str, tasks: Any) -> None:
    from caravel.contrib.django.compat import TaskResultDoesNotExist

    enqueued = tasks.add.using(backend=alias).enqueue(1, 1)
    with pytest.raises(Exception, match="Task does not match"):
        tasks.broken.using(backend=alias).get_result(enqueued.id)
    for bad in ("nope", "default:not-a-uuid", "Bad Queue:" + enqueued.id.split(":")[1]):
        with pytest.raises(TaskResultDoesNotExist):
            backend(alias).get_result(bad)
    with pytest.raises(TaskResultDoesNotExist):
        backend(alias).get_result("default:0190d1f2-0000-7000-8000-000000000000")


def test_a_failing_task_is_retried_then_failed_with_its_class_only(alias: str, tasks: Any) -> None:
    from caravel.contrib.django.compat import TaskResultStatus

    result = tasks.broken.using(backend=alias).enqueue()
    runs = drain(backend(alias).queue(), max_jobs=1)
    assert [run.outcome for run in runs] == ["retrying"]
    result.refresh()
    assert result.status == TaskResultStatus.READY  # due for its retry
    assert [e.exception_class_path for e in result.errors] == ["builtins.KeyError"]
    assert result.errors[0].exception_class is KeyError
    assert result.errors[0].traceback == ""
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value


def test_context_carries_the_attempt(alias: str, tasks: Any) -> None:
    from caravel.contrib.django.compat import TaskResultStatus
    from caravel.sync import SyncQueue
    from caravel.testing import ManualClock

    result = tasks.flaky.using(backend=alias).enqueue(2)
    b = backend(alias)
    clock = ManualClock(datetime.now(UTC) + timedelta(seconds=1))
    with SyncQueue(b.config.queue_url(), b.catalog.registry, clock=clock) as queue:
        runs = drain(queue, advance=True)
    assert [run.outcome for run in runs] == ["retrying", "retrying", "completed"]
    assert [seen[1] for seen in tasks.SEEN] == [1, 2, 3]
    assert {seen[2] for seen in tasks.SEEN} == {result.id}
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 3
    assert result.attempts == 3
    # The latest attempt's start: Caravel keeps no earlier one.
    assert result.started_at == result.last_attempted_at <= result.finished_at


def test_no_exception_message_reaches_the_queue(alias: str, tasks: Any) -> None:
    from tests.support.databases import sync_engine

    tasks.flaky.using(backend=alias).enqueue(5)
    work(alias)
    engine = sync_engine(backend(alias).config.queue_url())
    try:
        with engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT * FROM caravel_jobs").fetchall()
    finally:
        engine.dispose()
    assert rows
    assert "secret detail" not in repr(rows)


def test_run_after_defers_and_never_runs_early(alias: str, tasks: Any) -> None:
    from caravel.contrib.django.compat import TaskResultStatus

    later = datetime.now(UTC) + timedelta(hours=1, microseconds=1)
    result = tasks.add.using(backend=alias, run_after=later).enqueue(1, 2)
    assert work(alias) == []
    status = backend(alias).queue().get_status(result.id.split(":")[1], "default")
    assert status.due_at >= later
    assert tasks.add.using(backend=alias).get_result(result.id).status == TaskResultStatus.READY


def test_queue_names_and_priority(alias: str, tasks: Any) -> None:
    result = tasks.send_email.using(backend=alias).enqueue("b@example.com", subject="s")
    assert result.task.queue_name == "emails"
    assert result.task.priority == 10
    assert result.id.startswith("emails:")
    top = tasks.add.using(backend=alias, priority=100).enqueue(1, 1)
    bottom = tasks.add.using(backend=alias, priority=-100).enqueue(1, 1)
    assert {r.outcome for r in work(alias)} == {"completed"}
    assert top.task.priority == 100
    assert bottom.task.priority == -100
    assert tasks.add.using(backend=alias).get_result(top.id).task.priority == 100
    assert tasks.add.using(backend=alias).get_result(bottom.id).task.priority == -100


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"queue_name": "elsewhere"}, "Queue 'elsewhere' is not valid"),
        ({"priority": 101}, "priority must be a whole number"),
        ({"priority": -101}, "priority must be a whole number"),
        ({"run_after": datetime(2030, 1, 1)}, "run_after must be an aware datetime"),
    ],
)
def test_invalid_tasks_are_refused(
    alias: str, tasks: Any, change: dict[str, Any], message: str
) -> None:
    from caravel.contrib.django.compat import InvalidTask

    with pytest.raises(InvalidTask, match=message):
        tasks.add.using(backend=alias, **change)


def test_task_shapes_django_refuses(alias: str) -> None:
    from importlib import import_module

    from caravel.contrib.django.compat import SOURCE, InvalidTask

    task = import_module(SOURCE).task

    def local() -> None:
        pass

    with pytest.raises(InvalidTask, match="module level"):
        task(local, backend=alias)
    from tests.django.app import tasks as module

    with pytest.raises(InvalidTask, match="first argument of 'context'"):
        task(module.add.func, backend=alias, takes_context=True)


async def test_async_enqueue_and_async_results(alias: str, tasks: Any) -> None:
    from asgiref.sync import sync_to_async

    from caravel.contrib.django.compat import TaskResultStatus

    task = tasks.async_double.using(backend=alias)
    result = await task.aenqueue(21)
    assert result.status == TaskResultStatus.READY
    await sync_to_async(work)(alias)
    found = await task.aget_result(result.id)
    assert found.status == TaskResultStatus.SUCCESSFUL
    assert found.return_value == 42
    await result.arefresh()
    assert result.return_value == 42


def test_progress_and_meta_a_task_reports_read_back_with_its_result(alias: str, tasks: Any) -> None:
    from caravel import JobProgress
    from caravel.contrib.django import current_job
    from caravel.contrib.django.compat import TaskResultStatus

    result = tasks.counts_rows.using(backend=alias).enqueue(40)
    other = tasks.async_counts_rows.using(backend=alias).enqueue(5)
    assert (result.progress, result.meta) == (None, {})
    work(alias)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert isinstance(result.progress, JobProgress)
    assert (result.progress.done, result.progress.total) == (40, 40)
    assert result.progress.note == "counting"
    assert result.meta == {"rows": 40}
    found = tasks.async_counts_rows.using(backend=alias).get_result(other.id)
    assert (found.progress.done, found.progress.note, found.meta) == (5, "counted", {"async": True})
    with pytest.raises(RuntimeError, match="current_job"):
        current_job()


def test_a_result_read_back_refreshes_from_its_own_backend(alias: str, tasks: Any) -> None:
    from caravel.contrib.django.compat import TaskResultStatus

    enqueued = tasks.send_email.using(backend=alias).enqueue("c@example.com", subject="x")
    found = tasks.send_email.using(backend=alias).get_result(enqueued.id)
    assert (found.task.backend, found.task.queue_name) == (alias, "emails")
    work(alias)
    found.refresh()
    assert found.status == TaskResultStatus.SUCCESSFUL


def test_priority_reaches_the_stored_job_and_orders_claims(alias: str, tasks: Any) -> None:
    low = tasks.add.using(backend=alias, priority=-50).enqueue(1, 1)
    high = tasks.add.using(backend=alias, priority=50).enqueue(2, 2)
    status = backend(alias).queue().get_status(high.id.split(":")[1], "default")
    assert status.priority == 50
    runs = work(alias)
    assert [str(run.job_id) for run in runs] == [high.id.split(":")[1], low.id.split(":")[1]]


def test_no_exception_message_reaches_djangos_task_log(
    alias: str, tasks: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from caravel.contrib.django.compat import SOURCE

    with caplog.at_level(logging.DEBUG, logger=SOURCE):
        tasks.flaky.using(backend=alias).enqueue(5)
        work(alias)
    assert "state=FAILED" in caplog.text  # Django's receiver logged the attempt
    assert "secret detail" not in caplog.text


class Signals:
    """Django's three task signals as received: (signal, status, error class paths, backend)."""

    def __init__(self) -> None:
        from caravel.contrib.django.compat import task_enqueued, task_finished, task_started

        self.seen: list[tuple[str, str, list[str], str]] = []
        self._receivers = [
            (task_enqueued, self._receiver("enqueued")),
            (task_started, self._receiver("started")),
            (task_finished, self._receiver("finished")),
        ]

    def _receiver(self, name: str) -> Any:
        def record(sender: Any, task_result: Any, **kwargs: Any) -> None:
            paths = [error.exception_class_path for error in task_result.errors]
            self.seen.append((name, str(task_result.status), paths, task_result.backend))

        return record

    def __enter__(self) -> Signals:
        for signal, receiver in self._receivers:
            signal.connect(receiver, weak=False)
        return self

    def __exit__(self, *exc: object) -> None:
        for signal, receiver in self._receivers:
            signal.disconnect(receiver)


@pytest.mark.parametrize(
    ("name", "args", "finished", "error"),
    [
        ("add", (1, 2), "SUCCESSFUL", None),
        ("broken", (), "FAILED", "builtins.KeyError"),
        ("exits", (3,), "FAILED", "builtins.SystemExit"),
        ("async_exits", (), "FAILED", "builtins.SystemExit"),
        ("not_json", (), "FAILED", "builtins.TypeError"),
        ("async_not_json", (), "FAILED", "builtins.TypeError"),
        ("discards", (), "FAILED", "caravel.directives.Discard"),
    ],
)
def test_signals_are_sent_and_task_finished_for_every_finish(
    alias: str, tasks: Any, name: str, args: tuple[Any, ...], finished: str, error: str | None
) -> None:
    """Django: ``task_finished`` is sent when a task finishes, successfully or otherwise; a
    task that exits or returns what JSON cannot hold is a FAILED one, named by its class."""
    from caravel.contrib.django import options
    from caravel.contrib.django.compat import TaskResultStatus

    task = options(getattr(tasks, name).using(backend=alias), max_attempts=1)
    with Signals() as signals:
        result = task.enqueue(*args)
        runs = work(alias)
    errors = [error] if error else []
    assert signals.seen == [
        ("enqueued", "READY", [], alias),
        ("started", "RUNNING", [], alias),
        ("finished", finished, errors, alias),
    ]
    assert [run.outcome for run in runs] == ["completed" if error is None else "dead_letter"]
    result.refresh()
    assert result.status == getattr(TaskResultStatus, finished)
    assert [e.exception_class_path for e in result.errors] == errors
    if error is not None:
        assert result.errors[0].exception_class.__name__ == error.rsplit(".", 1)[1]


def test_a_failed_result_carries_the_class_and_the_detail_marked_safe(
    alias: str, tasks: Any
) -> None:
    """Django's ``TaskError`` has a class path and a traceback: the traceback is the line a
    traceback ends with, the safe detail in place of the message; nothing else of it."""
    from caravel.contrib.django import options
    from caravel.contrib.django.compat import task_finished

    finished: list[list[tuple[str, str]]] = []

    def record(sender: Any, task_result: Any, **kwargs: Any) -> None:
        finished.append([(e.exception_class_path, e.traceback) for e in task_result.errors])

    task_finished.connect(record, weak=False)
    try:
        options(tasks.provider_down.using(backend=alias), max_attempts=1).enqueue()
        tasks.broken.using(backend=alias).enqueue()
        work(alias)
    finally:
        task_finished.disconnect(record)
    assert sorted(finished) == [
        [("builtins.KeyError", "")],
        [("caravel.directives.JobFailed", "caravel.directives.JobFailed: provider answered 503")],
    ]
    assert "a@example.com" not in repr(finished)


@pytest.mark.parametrize("name", ["exits", "async_exits"])
def test_a_task_that_exits_fails_and_the_worker_runs_the_next_task(
    alias: str, tasks: Any, name: str
) -> None:
    from caravel.contrib.django.compat import TaskResultStatus

    exiting = getattr(tasks, name).using(backend=alias, priority=100)
    failed = exiting.enqueue(*((1,) if name == "exits" else ()))
    after = tasks.add.using(backend=alias).enqueue(2, 2)
    runs = work(alias)  # returns: before the fix, SystemExit left the worker's loop
    assert [(run.outcome, run.failure) for run in runs][:2] == [
        ("retrying", "HandlerExited"),
        ("completed", None),
    ]
    failed.refresh()
    assert failed.status == TaskResultStatus.READY  # due for its retry, as any failure
    assert [e.exception_class_path for e in failed.errors] == ["builtins.SystemExit"]
    after.refresh()
    assert after.return_value == 4
