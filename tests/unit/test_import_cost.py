"""What importing Caravel loads: the library's heavy dependencies wait until a call needs them.

``import caravel`` loads no Alembic, Mako, SQLAlchemy ORM or database driver; neither does a
producer's or a worker's import of the queue and worker classes, nor ``caravel --help``. (How
long it takes is measured in ``bench/`` and reported in ``docs/performance.md``.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("alembic", "mako", "sqlalchemy.orm", "psycopg", "aiosqlite", "sqlite3")

PROBE = """
import json, sys
{code}
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {roots!r} or m in {heavy!r})))
"""


def loaded(code: str) -> set[str]:
    roots = {name.split(".")[0] for name in HEAVY}
    script = PROBE.format(code=code, roots=sorted(roots), heavy=list(HEAVY))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    found: list[str] = json.loads(done.stdout.splitlines()[-1])
    return {name for name in found if any(name == h or name.startswith(h + ".") for h in HEAVY)}


@pytest.mark.parametrize(
    "code",
    [
        "import caravel",
        "from caravel import DatabaseQueue, DispatchOptions, JobRegistry, QueueWorker",
        "from caravel import QueueInspector, Leases, JobContext, QueueOptions",
        "import caravel.cli.main",
        """
from contextlib import redirect_stdout
import io
from caravel.cli.main import app
try:
    with redirect_stdout(io.StringIO()):
        app(["--help"])
except SystemExit:
    pass
""",
    ],
    ids=["import", "producer-and-worker", "operator-and-integrations", "cli-import", "cli-help"],
)
def test_no_heavy_dependency_is_imported_before_it_is_needed(code: str) -> None:
    assert loaded(code) == set()


def test_opening_a_sqlite_queue_loads_sqlite_but_no_postgresql_driver(tmp_path: object) -> None:
    found = loaded(
        f"from caravel import DatabaseQueue, JobRegistry\n"
        f"DatabaseQueue('sqlite:///{tmp_path}/q.db', JobRegistry())"
    )
    assert "aiosqlite" in found
    assert not {name for name in found if name.startswith(("psycopg", "alembic", "mako"))}


def test_the_public_modules_are_attributes_of_the_package_too() -> None:
    """``caravel.migrate.upgrade(url)`` works after a bare ``import caravel``, as documented;
    naming the module still imports no Alembic (its functions do, when called)."""
    found = loaded(
        "import caravel\n"
        "assert callable(caravel.migrate.upgrade)\n"
        "assert caravel.testing.ManualClock is not None\n"
    )
    assert found == set()
