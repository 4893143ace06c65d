"""An enqueue inside ``transaction.atomic()``: on the queue's shared database the job is part
of Django's transaction (a rollback drops it with the rows beside it); on a separate queue
database it is sent when the transaction commits, and never after a rollback."""

from __future__ import annotations

from typing import Any

import pytest

from tests.django.conftest import empty_queue


def backend(alias: str) -> Any:
    from caravel.contrib.django.compat import task_backends

    return task_backends[alias]


class Boom(Exception):
    pass


def test_a_rollback_drops_the_job_with_the_row_beside_it(alias: str, tasks: Any) -> None:
    from django.contrib.auth.models import User
    from django.db import transaction

    from caravel.contrib.django.compat import TaskResultDoesNotExist

    users = User.objects.using(alias)
    enqueued: list[Any] = []

    def rolled_back() -> None:
        with transaction.atomic(using=alias):
            users.create(username="rolled-back")
            enqueued.append(tasks.add.using(backend=alias).enqueue(1, 2))
            raise Boom

    with pytest.raises(Boom):
        rolled_back()
    (result,) = enqueued
    assert not users.filter(username="rolled-back").exists()
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.using(backend=alias).get_result(result.id)


def test_a_commit_keeps_both(alias: str, tasks: Any) -> None:
    from django.contrib.auth.models import User
    from django.db import transaction

    users = User.objects.using(alias)
    with transaction.atomic(using=alias):
        users.create(username=f"committed-{alias}")
        result = tasks.add.using(backend=alias).enqueue(2, 2)
    assert users.filter(username=f"committed-{alias}").exists()
    from caravel.testing import drain

    drain(backend(alias).queue())
    assert tasks.add.using(backend=alias).get_result(result.id).return_value == 4
    users.filter(username=f"committed-{alias}").delete()


def test_a_separate_queue_database_gets_the_job_on_commit(tasks: Any) -> None:
    from django.db import transaction

    from caravel.contrib.django.compat import TaskResultDoesNotExist

    empty_queue("separate")
    task = tasks.add.using(backend="separate")
    with transaction.atomic():
        pending = task.enqueue(3, 4)
        with pytest.raises(TaskResultDoesNotExist):
            task.get_result(pending.id)  # not sent yet
    assert task.get_result(pending.id).args == [3, 4]

    enqueued: list[Any] = []

    def rolled_back() -> None:
        with transaction.atomic():
            enqueued.append(task.enqueue(5, 6))
            raise Boom

    with pytest.raises(Boom):
        rolled_back()
    (dropped,) = enqueued
    with pytest.raises(TaskResultDoesNotExist):
        task.get_result(dropped.id)

    outside = task.enqueue(7, 8)  # no transaction open: sent at once
    assert task.get_result(outside.id).args == [7, 8]
