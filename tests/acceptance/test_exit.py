"""Interpreter exit: a process that leaves a ``SyncQueue`` open, and the Django backend's
commands, exit 0 and print nothing on stderr, on every supported Python (docs/guides/sync.md
promises the queue is closed at exit). Python 3.12 refuses to start a thread once its exit has
begun, so closing a SQLite store whose reader or writer thread never started used to print
``Exception ignored ... the queue's SQLite store is closed`` there, and only there.

Each script runs under the checkout's environment of each version
(:mod:`tests.support.interpreters`), importing this checkout's ``src``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.interpreters import VERSIONS, python_for
from tests.support.processes import PYTHONPATH

pytestmark = pytest.mark.slow  # interpreters in subprocesses

LEFT_OPEN = """
import sys
from dataclasses import dataclass
from uuid import uuid4

from caravel import DispatchOptions, JobContext, JobRegistry, SyncQueue

registry = JobRegistry()


@dataclass(frozen=True)
class Note:
    text: str


@registry.handles("exit.note.v1", Note)
def note(job: Note, ctx: JobContext[None]) -> None:
    pass


queue = SyncQueue(sys.argv[1], registry)
if sys.argv[2] == "write":
    queue.enqueue(Note("hello"), DispatchOptions(queue="notes"))
else:
    assert queue.get_status(uuid4(), "notes") is None
print("left open")
"""


def run(python: Path, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run ``python args`` and return its stdout, asserting exit 0 and an empty stderr."""
    environment = {**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})}
    done = subprocess.run(
        [str(python), *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("use", ["write", "read"])
def test_a_sync_queue_left_open_exits_quietly(
    version: str, use: str, db_url: str, tmp_path: Path
) -> None:
    python = python_for(version)
    (tmp_path / "left_open.py").write_text(LEFT_OPEN, encoding="utf-8")
    assert run(python, ["left_open.py", db_url, use], tmp_path) == "left open\n"


ENQUEUE = """
from django.db import transaction

from caravel_samples.django.shop.models import Order
from caravel_samples.django.shop.tasks import send_receipt

with transaction.atomic():
    order = Order.objects.create(email="ann@example.com", total_cents=990)
    result = send_receipt.enqueue(order.pk)
print(result.status)
"""

REPLAY = """
from django.contrib.auth.models import User
from django.test import Client

from caravel.contrib.django.models import Job

client = Client()
client.force_login(User.objects.create_superuser("exit-admin", password="pw"))
(job,) = Job.objects.all()
page = client.post(
    "/admin/caravel/job/", {"action": "replay", "_selected_action": [str(job.pk)]}, follow=True
)
print(page.content.decode())
"""


@pytest.mark.django
@pytest.mark.parametrize("version", VERSIONS)
def test_the_django_backends_commands_exit_quietly(version: str, tmp_path: Path) -> None:
    """The Django sample on SQLite: an enqueue in a transaction (the guide's ``enqueue.py``),
    ``caravel_status --json``, and the admin's Replay, each a process of its own."""
    python = python_for(version)
    sample = ["-m", "caravel_samples.django"]
    env = {"CARAVEL_DATABASE_URL": f"sqlite:///{tmp_path}/shop.db"}
    run(python, [*sample, "migrate", "--noinput", "--verbosity", "0"], tmp_path, env)
    assert (
        run(python, [*sample, "shell", "-v", "0", "-c", ENQUEUE], tmp_path, env).strip() == "READY"
    )
    status = run(python, [*sample, "caravel_status", "--json"], tmp_path, env)
    assert '"receipts"' in status
    page = run(python, [*sample, "shell", "-v", "0", "-c", REPLAY], tmp_path, env)
    # A ready job is no dead letter: the action went through the queue and changed nothing.
    assert "1 job(s) were not dead letters; unchanged." in page
