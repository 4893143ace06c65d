"""The admin's read-only job list and its Replay action behind ``caravel.replay_job``; and
``manage.py migrate`` reversing (once nothing would be lost) and re-applying the queue schema
through the app's migration."""

from __future__ import annotations

from typing import Any

import pytest

from caravel.testing import drain


@pytest.fixture
def dead_letter(tasks: Any) -> Any:
    from caravel.contrib.django import options
    from tests.django.conftest import empty_queue

    empty_queue("default")
    result = options(tasks.broken, max_attempts=1).enqueue()
    drain(tasks.broken.get_backend().queue())
    return result


def user(name: str, *, superuser: bool = False, perms: tuple[str, ...] = ()) -> Any:
    from django.contrib.auth.models import Permission, User

    User.objects.filter(username=name).delete()
    made = User.objects.create_user(name, password="pw", is_staff=True, is_superuser=superuser)
    for codename in perms:
        made.user_permissions.add(Permission.objects.get(codename=codename))
    return made


def test_the_job_list_is_read_only(dead_letter: Any) -> None:
    from django.test import Client

    client = Client()
    client.force_login(user("viewer", perms=("view_job",)))
    page = client.get("/admin/caravel/job/?state__exact=dead_letter")
    assert page.status_code == 200
    body = page.content.decode()
    assert dead_letter.id.split(":")[1] in body
    assert "builtins.KeyError" in body
    assert "Replay the selected" not in body  # no replay_job permission
    assert "never stored either" not in body
    assert client.get("/admin/caravel/job/add/").status_code == 403


def test_replay_needs_its_permission_and_replays(dead_letter: Any, tasks: Any) -> None:
    from django.test import Client

    from caravel.contrib.django.compat import TaskResultStatus

    job_id = dead_letter.id.split(":")[1]
    client = Client()
    client.force_login(user("replayer", perms=("view_job", "replay_job")))
    listing = client.get("/admin/caravel/job/")
    assert "Replay the selected" in listing.content.decode()
    done = client.post(
        "/admin/caravel/job/",
        {"action": "replay", "_selected_action": [job_id]},
        follow=True,
    )
    assert done.status_code == 200
    assert "Replayed 1 job(s)." in done.content.decode()
    assert tasks.broken.get_result(dead_letter.id).status == TaskResultStatus.READY


def test_migrate_reverses_and_reapplies_the_queue_schema(dead_letter: Any) -> None:
    from django.core.management import call_command
    from sqlalchemy import inspect

    from caravel import DowngradeRefusedError, migrate
    from tests.django.conftest import queue_url
    from tests.support.databases import sync_engine

    url = queue_url("default")

    def tables() -> set[str]:
        engine = sync_engine(url)
        try:
            return set(inspect(engine).get_table_names())
        finally:
            engine.dispose()

    # Reversing would delete the dead letter (and the record of its one attempt): refused, and
    # the queue stays.
    with pytest.raises(DowngradeRefusedError, match="would delete 1 attempt record, delete 1 job;"):
        call_command("migrate", "caravel", "zero", verbosity=0)
    assert "caravel_jobs" in tables()
    migrate.downgrade(url, "base", force=True)  # `caravel db downgrade --force base`
    call_command("migrate", "caravel", "zero", verbosity=0)
    assert "caravel_jobs" not in tables()
    call_command("migrate", verbosity=0)
    assert "caravel_jobs" in tables()
    migrate.check(url)


def test_the_apps_migrations_match_its_model() -> None:
    from django.core.management import call_command

    call_command("makemigrations", "caravel", check=True, dry_run=True, verbosity=0)


def test_caravel_status_counts_the_backends_jobs(
    tasks: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from django.core.management import call_command

    from tests.django.conftest import empty_queue

    empty_queue("default")
    tasks.send_email.enqueue("d@example.com", subject="s")
    call_command("caravel_status", json=True)
    counts = json.loads(capsys.readouterr().out)
    assert "emails" in json.dumps(counts)


def test_the_commands_name_a_caravel_backend() -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no backend 'nope'"):
        call_command("caravel_status", backend="nope")
