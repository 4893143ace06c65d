"""``--app module:attribute``: a module that fails to import says why (not found, or the error
the operator's own module raised), a missing attribute is named, and an attribute that is not a
job registry (a class, a function) is refused with exit 2 and never called."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.processes import ROOT, run_cli

pytestmark = pytest.mark.slow

MODULES = {
    "broken_import.py": "import caravel_no_such_dependency\n",
    "broken_code.py": "registry = undefined_name + 1\n",
    "not_a_registry.py": (
        "from pathlib import Path\n"
        "class Registry:\n    pass\n"
        "def make():\n    Path(__file__).with_suffix('.called').touch()\n"
        "number = 3\n"
    ),
}


@pytest.fixture
def apps(tmp_path: Path) -> dict[str, str]:
    for name, text in MODULES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}


@pytest.mark.parametrize(
    ("app", "expected"),
    [
        (
            "caravel_no_such_module:registry",
            "module 'caravel_no_such_module' could not be imported: it was not found",
        ),
        (
            "broken_import:registry",
            "ModuleNotFoundError: No module named 'caravel_no_such_dependency'",
        ),
        ("broken_code:registry", "NameError: name 'undefined_name' is not defined"),
        ("not_a_registry:missing", "module 'not_a_registry' has no attribute 'missing'"),
        (
            "not_a_registry:Registry",
            "'not_a_registry:Registry' is of type type, not a caravel.JobRegistry",
        ),
        ("not_a_registry:make", "is of type function, not a caravel.JobRegistry"),
        ("not_a_registry:number", "is of type int, not a caravel.JobRegistry"),
        ("nocolon", "app: must look like package.module:registry"),
    ],
)
@pytest.mark.parametrize("command", ["worker", "relay"])
def test_a_bad_app_is_refused_in_one_line_with_exit_two(
    tmp_path: Path, apps: dict[str, str], app: str, expected: str, command: str
) -> None:
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    args = (
        ["worker", "--url", url, "--queue", "q", "--app", app]
        if command == "worker"
        else ["outbox", "relay", "--url", url, "--app-url", url, "--app", app]
    )
    done = run_cli(*args, env=apps)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "not_a_registry.called").exists()  # nothing was called
