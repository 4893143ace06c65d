"""What importing Caravel loads: the library's heavy dependencies wait until a call needs them.

``import caravel`` loads no Alembic, Mako, SQLAlchemy ORM or database driver; neither does a
producer's or a worker's import of the queue and worker classes, nor ``caravel --help``. A
``caravel worker`` process runs its first job without Alembic, Mako, Rich, the other commands'
modules, or the cron parser and trace propagators when it has no schedules and traces nothing. (How
long it takes is measured in ``bench/`` and reported in ``docs/performance.md``.)
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from caravel import DatabaseQueue, DispatchOptions, migrate

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


PROBE_APP = """
import gc, json, os, signal, sys
from dataclasses import dataclass

from caravel import JobRegistry

registry = JobRegistry()


@dataclass(frozen=True)
class Probe:
    n: int


@registry.handles("probe.v1", Probe)
async def probe(job: Probe, ctx: object) -> None:
    found = {"modules": sorted(sys.modules), "collecting": gc.isenabled()}
    print(json.dumps({**found, "frozen": gc.get_freeze_count()}), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
"""


def test_a_worker_running_its_first_job_has_loaded_no_alembic_mako_rich_or_other_command(
    tmp_path: Path,
) -> None:
    """What ``caravel worker`` has imported by the time its first handler runs: the migration
    tooling, the tables' Rich, the other commands' modules, and what only schedules and tracing
    need stay out of a worker's start-up, and so does PostgreSQL's dialect on SQLite (the schema
    builds its partial indexes, whose options load every dialect, only for migrations).
    Start-up ran with the collector off; by the first job everything loaded is frozen and the
    collector is on again."""
    (tmp_path / "probe_app.py").write_text(PROBE_APP)
    url = f"sqlite:///{tmp_path / 'q.db'}"
    migrate.upgrade(url)
    sys.path.insert(0, str(tmp_path))
    try:
        from probe_app import Probe, registry  # type: ignore[import-not-found]

        async def enqueue() -> None:
            async with DatabaseQueue(url, registry) as queue:
                await queue.enqueue(Probe(1), DispatchOptions(queue="probe"))

        asyncio.run(enqueue())
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("probe_app", None)
    command = [sys.executable, "-m", "caravel", "worker", "--url", url]
    command += ["--app", "probe_app:registry", "--queue", "probe"]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(done.stdout.splitlines()[0])
    found = set(seen["modules"])
    heavy = {m for m in found if m.split(".")[0] in {"alembic", "mako", "rich", "croniter"}}
    assert heavy == set()  # the cron parser too: this registry has no schedules
    assert "opentelemetry.propagate" not in found  # nothing is traced: no propagator loaded
    assert "sqlalchemy.dialects.postgresql" not in found  # a SQLite queue's worker
    assert "caravel.worker" in found  # the probe ran inside the worker
    commands = {m for m in found if m.startswith("caravel.cli.")}
    assert not commands & {"caravel.cli.jobs", "caravel.cli.queues", "caravel.cli.dashboard"}
    assert seen["collecting"] is True
    assert seen["frozen"] > 0
