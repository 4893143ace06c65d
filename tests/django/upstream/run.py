"""Run Django's own Tasks tests against CaravelBackend: ``python -m tests.django.upstream.run
QUEUE_URL`` (a migrated, empty queue database). Exits 0 when every test that runs passes.

Django's tests are not changed; the configuration is:

* Django's settings: an in-memory SQLite ``default`` database, the ``tasks`` test package as
  an installed app (so its ``tasks`` module is the backend's task catalog), ``USE_TZ``.
* Every ``TASKS`` configuration that names Django's ``ImmediateBackend``, in the settings or in
  a test's ``override_settings``, names ``CaravelBackend`` instead, its queue at ``QUEUE_URL``,
  one attempt per task (Django's backends never retry). Its ``QUEUES`` are kept.
* The immediate backend runs a task inside ``enqueue``. Here a ``task_enqueued`` receiver runs
  Caravel's worker (``caravel.testing.drain``) on the backend's queue and refreshes the result
  ``enqueue`` returns from the stored job, so a test sees what it would see from Django's.
* The queue's tables are emptied before each test.
* ``excluded.txt`` names tests (or whole modules) that do not run, each with its reason; an
  entry that names nothing in this Django's tests is an error, so the list cannot go stale.
"""

from __future__ import annotations

import contextlib
import sys
import unittest
from typing import Any

from tests.django.upstream.fetch import HERE, PACKAGE, upstream_root

IMMEDIATE = "django.tasks.backends.immediate.ImmediateBackend"
OURS = "caravel.contrib.django.CaravelBackend"


def excluded() -> dict[str, str]:
    """``excluded.txt``: each test id (``module.Class.test`` or ``module``) and its reason."""
    entries: dict[str, str] = {}
    for line in (HERE / "excluded.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, _, reason = line.partition(" ")
        if not reason.strip():
            raise SystemExit(f"excluded.txt: {name} has no reason")
        entries[name] = reason.strip()
    return entries


def ours(tasks: dict[str, Any], url: str) -> dict[str, Any]:
    """``TASKS`` with every immediate backend replaced by ours on ``url``."""
    mapped = {}
    for alias, config in tasks.items():
        if config.get("BACKEND") == IMMEDIATE:
            options = {"URL": url, "MAX_ATTEMPTS": 1}
            config = {**config, "BACKEND": OURS, "OPTIONS": options}
        mapped[alias] = config
    return mapped


def configure(url: str) -> None:
    from django.conf import settings

    import django

    settings.configure(
        DEBUG=False,
        USE_TZ=True,
        SECRET_KEY="django-upstream-tests",
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", PACKAGE],
        TASKS=ours({"default": {"BACKEND": IMMEDIATE}}, url),
    )
    django.setup()
    from django.core.signals import setting_changed
    from django.tasks.signals import clear_tasks_handlers, task_enqueued

    def override(*, setting: str, **kwargs: Any) -> None:
        value = getattr(settings, "TASKS", None)
        if setting != "TASKS" or not isinstance(value, dict):
            return
        mapped = ours(value, url)
        if mapped != value:
            settings.TASKS = mapped
            clear_tasks_handlers(setting="TASKS")  # Django's handler, reset from ours

    def run_now(sender: Any, task_result: Any, **kwargs: Any) -> None:
        from django.tasks import task_backends
        from django.tasks.exceptions import TaskResultDoesNotExist

        from caravel.contrib.django import CaravelBackend
        from caravel.testing import drain

        backend = task_backends[task_result.backend]
        if not isinstance(backend, CaravelBackend):
            return
        drain(backend.queue())
        # Not found: sent when the transaction commits (a separate queue database).
        with contextlib.suppress(TaskResultDoesNotExist):
            task_result.refresh()

    setting_changed.connect(override, weak=False)
    task_enqueued.connect(run_now, weak=False)


def main(url: str) -> int:
    root = upstream_root()
    sys.path.insert(0, str(root))
    configure(url)
    from django.test.runner import DiscoverRunner

    from tests.support.databases import empty_queue_tables

    skip = excluded()
    found: set[str] = set()

    class Result(unittest.TextTestResult):
        def startTest(self, test: unittest.TestCase) -> None:
            empty_queue_tables(url)
            super().startTest(test)

    class Runner(DiscoverRunner):
        def get_resultclass(self) -> Any:
            return Result

        def build_suite(self, *args: Any, **kwargs: Any) -> Any:
            suite = super().build_suite(*args, **kwargs)
            kept = unittest.TestSuite()
            for test in _flatten(suite):
                names = _names(test.id())
                hit = [name for name in names if name in skip]
                found.update(hit)
                if not hit:
                    kept.addTest(test)
            return kept

    modules = sorted(f"{PACKAGE}.{p.stem}" for p in (root / PACKAGE).glob("test_*.py"))
    failures = Runner(verbosity=2, interactive=False).run_tests(modules)
    stale = sorted(set(skip) - found)
    if stale:
        print(f"excluded.txt names tests this Django does not have: {', '.join(stale)}")
        return 1
    print(f"excluded as excluded.txt says: {len(found)} entries")
    return 1 if failures else 0


def _flatten(suite: unittest.TestSuite) -> list[unittest.TestCase]:
    tests: list[unittest.TestCase] = []
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            tests.extend(_flatten(item))
        else:
            tests.append(item)
    return tests


def _names(test_id: str) -> list[str]:
    """``a.b.C.test`` and each of its prefixes: an entry may name a module or a class."""
    parts = test_id.split(".")
    return [".".join(parts[:n]) for n in range(2, len(parts) + 1)]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m tests.django.upstream.run QUEUE_URL")
    raise SystemExit(main(sys.argv[1]))
