"""Guard ``caravel.testing``'s public API: its ``__all__`` changes only on purpose, every name is
documented and resolves, and importing it stays cheap (``import caravel`` does not import it;
``from caravel.testing import ManualClock`` loads neither pytest nor the worker)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

import caravel.testing

TESTING_NAMES = [
    "DrainLimitError",
    "EnqueuedJob",
    "ImmediateQueue",
    "JobRun",
    "ManualClock",
    "all_enqueued",
    "assert_enqueued",
    "drain",
    "perform",
    "perform_sync",
    "refute_enqueued",
]


def test_all_is_exactly_the_reviewed_list() -> None:
    assert caravel.testing.__all__ == TESTING_NAMES
    assert sorted(TESTING_NAMES, key=lambda name: (name[0].islower(), name)) == TESTING_NAMES


def test_every_public_name_has_a_home_and_nothing_else_does() -> None:
    assert sorted(caravel.testing._HOMES) == sorted(TESTING_NAMES)


@pytest.mark.parametrize("name", TESTING_NAMES)
def test_every_name_resolves_and_has_its_own_docstring(name: str) -> None:
    obj = getattr(caravel.testing, name)
    assert obj.__module__.split(".")[0] == "caravel"
    assert obj.__name__ == name
    doc = vars(obj).get("__doc__") if isinstance(obj, type) else obj.__doc__
    assert isinstance(doc, str)
    assert doc.strip()
    assert not doc.startswith(f"{name}(")
    assert inspect.getdoc(obj)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        _ = caravel.testing.nothing_here


def _modules_after(code: str) -> set[str]:
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_import_caravel_does_not_import_the_testing_helpers() -> None:
    assert not {m for m in _modules_after("import caravel") if m.startswith("caravel.testing")}


def test_the_manual_clock_alone_loads_no_pytest_worker_or_store() -> None:
    found = _modules_after("from caravel.testing import ManualClock")
    heavy = {"pytest", "_pytest", "caravel.worker", "caravel.store", "caravel.testing.plugin"}
    assert not {m for m in found if m.split(".")[0] in heavy or m in heavy}


def test_the_pytest_plugin_loads_no_queue_until_a_fixture_needs_one() -> None:
    """It loads in every pytest run of a project with Caravel installed."""
    found = _modules_after("import caravel.testing.plugin")
    loaded = {m for m in found if m.split(".")[0] in {"sqlalchemy", "pydantic", "psycopg"}}
    assert loaded == set()
    assert "caravel.queue" not in found
