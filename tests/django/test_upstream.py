"""Django's own Tasks tests, from the pinned Django's sdist, against CaravelBackend with its
queue on SQLite, PostgreSQL and MariaDB (``tests/django/upstream``: what is adapted, what is
excluded and why). They run in a process of their own: Django's settings belong to a process,
and these are Django's test settings, not this folder's. Collected only with Django 6
(``make test-django312``)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.django.upstream.fetch import ROOT, pinned_version, upstream_root
from tests.support.databases import IN_CI

pytestmark = pytest.mark.slow

#: Tests that must be among those run: a task's KeyboardInterrupt reaches the caller of
#: enqueue; Django logs the three signals of a task that succeeds and of one that fails.
MUST_PASS = ("test_throws_keyboard_interrupt", "test_enqueue_logs", "test_failed_logs")


@pytest.fixture(scope="module")
def upstream() -> None:
    import django

    if django.get_version() != pinned_version():
        pytest.fail(
            f"Django {django.get_version()} is installed, its tests are pinned to "
            f"{pinned_version()}: change tests/django/upstream/constraints.txt (or reinstall "
            ".venv312: make test-django312)",
            pytrace=False,
        )
    try:
        upstream_root()
    except (OSError, subprocess.CalledProcessError) as exc:
        reason = f"could not download Django {pinned_version()}'s sdist: {exc}"
        if IN_CI:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


def test_djangos_own_tasks_tests_pass_against_our_backend(upstream: None, db_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.django.upstream.run", db_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(r"^OK$", output, re.MULTILINE), output
    for name in MUST_PASS:  # they ran (and, the run being OK, passed)
        assert f"{name} (tasks.test_immediate_backend.ImmediateBackendTestCase.{name})" in output
