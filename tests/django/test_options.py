"""Caravel's own options from Django code (``caravel.contrib.django.options``): idempotency
keys, tenants, tags, attempts; the task catalog's wire names; an unknown task at run time."""

from __future__ import annotations

from typing import Any

import pytest

from caravel.testing import drain


def backend(alias: str) -> Any:
    from caravel.contrib.django.compat import task_backends

    return task_backends[alias]


def test_an_idempotency_key_returns_the_original(alias: str, tasks: Any) -> None:
    from caravel.contrib.django import options

    keyed = options(tasks.add.using(backend=alias), idempotency_key="order-7")
    first = keyed.enqueue(1, 2)
    again = keyed.enqueue(1, 2)
    assert again.id == first.id
    from caravel.errors import IdempotencyConflictError

    with pytest.raises(IdempotencyConflictError):
        keyed.enqueue(9, 9)  # the same key with another payload
    assert len(drain(backend(alias).queue())) == 1


def test_a_tenant_job_is_read_under_its_tenant_only(alias: str, tasks: Any) -> None:
    from caravel.contrib.django import options, result
    from caravel.contrib.django.compat import TaskResultDoesNotExist

    add = tasks.add.using(backend=alias)
    enqueued = options(add, tenant_id="acme", tags=["billing"]).enqueue(2, 5)
    drain(backend(alias).queue())
    assert result(add, enqueued.id, tenant_id="acme").return_value == 7
    with pytest.raises(TaskResultDoesNotExist):
        add.get_result(enqueued.id)  # the default tenant's jobs only
    with pytest.raises(TaskResultDoesNotExist):
        result(add, enqueued.id, tenant_id="other")
    status = backend(alias).queue().get_status(enqueued.id.split(":")[1], "default", "acme")
    assert status.tags == ("billing",)


def test_options_are_checked_when_given(tasks: Any) -> None:
    from caravel.contrib.django import options
    from caravel.errors import ValidationError

    with pytest.raises(ValidationError, match="tenant_id"):
        options(tasks.add, tenant_id="")
    with pytest.raises(ValidationError, match="max_attempts"):
        options(tasks.add, max_attempts=0)
    kept = options(options(tasks.add, idempotency_key="k"), tenant_id="t").using(priority=5)
    assert (kept.idempotency_key, kept.tenant_id, kept.priority) == ("k", "t", 5)


def test_max_attempts_dead_letters_as_failed(alias: str, tasks: Any) -> None:
    from caravel.contrib.django import options
    from caravel.contrib.django.compat import TaskResultStatus

    enqueued = options(tasks.broken.using(backend=alias), max_attempts=1).enqueue()
    assert [run.outcome for run in drain(backend(alias).queue())] == ["dead_letter"]
    found = tasks.broken.using(backend=alias).get_result(enqueued.id)
    assert found.status == TaskResultStatus.FAILED
    assert found.is_finished
    assert [e.exception_class_path for e in found.errors] == ["builtins.KeyError"]
    with pytest.raises(ValueError, match="failed"):
        _ = found.return_value


def test_wire_names_come_from_module_paths(tasks: Any) -> None:
    from caravel.contrib.django.catalog import catalog_for

    catalog = catalog_for("default", None)
    entry = catalog.entry_for(tasks.send_email)
    assert entry is not None
    assert entry.wire_name == "tests.django.app.tasks.send-email"
    assert catalog.entry_named(entry.wire_name) is entry
    assert {e.task.name for e in catalog} >= {"add", "send_email", "flaky", "broken"}


def test_clashing_wire_names_are_refused_at_build_time() -> None:
    from django.core.exceptions import ImproperlyConfigured

    from caravel.contrib.django.catalog import TaskCatalog
    from tests.django.app import clashing

    with pytest.raises(ImproperlyConfigured, match="same wire name"):
        TaskCatalog([clashing.notify, clashing.Notify])


def test_a_task_outside_the_catalog_is_refused_at_enqueue(tasks: Any) -> None:
    from caravel.contrib.django.compat import InvalidTask
    from tests.django.app import clashing

    with pytest.raises(InvalidTask, match="not one this backend runs"):
        clashing.notify.enqueue()


def test_an_unknown_task_at_run_time_is_a_recorded_failure(alias: str) -> None:
    from dataclasses import dataclass

    from caravel import DispatchOptions, FailureCategory, JobRegistry
    from caravel.sync import SyncQueue

    @dataclass(frozen=True)
    class Gone:
        pass

    other = JobRegistry()
    other.register("tests.django.app.tasks.gone", Gone, lambda job, ctx: None)
    url = backend(alias).config.queue_url()
    with SyncQueue(url, other) as producer:
        job = producer.enqueue(Gone(), DispatchOptions(queue="default", max_attempts=1))
    runs = drain(backend(alias).queue())
    assert [(run.outcome, run.failure) for run in runs] == [
        ("dead_letter", FailureCategory.UNKNOWN_JOB_TYPE)
    ]
    status = backend(alias).queue().get_status(job.job_id, "default")
    assert status.last_failure == FailureCategory.UNKNOWN_JOB_TYPE


def test_unknown_options_are_refused_by_name() -> None:
    from django.core.exceptions import ImproperlyConfigured

    from caravel.contrib.django import CaravelBackend

    with pytest.raises(ImproperlyConfigured, match="unknown key 'URLS'"):
        CaravelBackend("x", {"OPTIONS": {"URLS": "sqlite:///x"}})
    with pytest.raises(ImproperlyConfigured, match="QUEUES"):
        CaravelBackend("x", {"QUEUES": ["Not Ours"]})
    with pytest.raises(ImproperlyConfigured, match="MAX_ATTEMPTS"):
        CaravelBackend("x", {"OPTIONS": {"MAX_ATTEMPTS": 0}})


def test_the_system_check_reports_a_catalog_that_cannot_be_built() -> None:
    from caravel.contrib.django import CaravelBackend

    clashing = CaravelBackend(
        "clashing",
        {
            "OPTIONS": {
                "TASKS": ["tests.django.app.clashing.notify", "tests.django.app.clashing.Notify"]
            }
        },
    )
    (error,) = clashing.check()
    assert error.id == "caravel.E001"
    assert "same wire name" in error.msg
    missing = CaravelBackend("missing", {"OPTIONS": {"TASKS": ["tests.django.app.tasks.SEEN"]}})
    assert "is not a task" in missing.check()[0].msg
    from caravel.contrib.django.compat import task_backends

    assert task_backends["default"].check() == []
