"""`make dist`: the sdist and the wheel it builds install into fresh virtual environments, with
each extra, and each extra brings what pyproject.toml says it is for (docs/install.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.dist import ROOT, Dist, built_dist
from tests.support.processes import free_port, served_page

pytestmark = pytest.mark.slow

#: What each extra promises, as commands run in the fresh environment (its bin first on PATH),
#: in an empty folder.
PROMISES: dict[str, list[list[str]]] = {
    "": [
        ["caravel", "db", "upgrade", "--url", "sqlite:///queue.db"],  # the migrations are in it
        ["caravel", "db", "check", "--url", "sqlite:///queue.db"],
        # The core pulls in no extra's packages.
        [
            "python",
            "-c",
            "import importlib.util, sys; extras = ('starlette', 'django', 'pytest', 'uvloop', "
            "'fastapi', 'pgqueuer', 'asyncmy', 'pymysql', 'aio_pika', 'nats'); "
            "found = [m for m in extras if importlib.util.find_spec(m)]; "
            "sys.exit(f'installed without their extra: {found}' if found else None)",
        ],
    ],
    "web": [["caravel", "db", "upgrade", "--url", "sqlite:///queue.db"]],  # then served below
    # The Django sample's settings with caravel.contrib.django installed: Django's own checks.
    "django": [["python", "-m", "caravel_samples.django", "check"]],
    # The pytest plugin, found through its entry point, with its async queue fixture.
    "testing": [
        [
            "python",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_default_fixture_loop_scope=function",
            "test_plugin.py",
        ]
    ],
    "uvloop": [["python", "-c", "import uvloop; from caravel.cli.entry import main"]],
    "samples": [
        [
            "python",
            "-c",
            "import caravel_samples.backend.app, caravel_samples.flask.app, caravel_samples.worker"
            ", opentelemetry.sdk, opentelemetry.exporter.prometheus",
        ],
        ["python", "-m", "caravel_samples.backend", "--help"],
    ],
    "bench": [["python", "-c", "import pgqueuer, procrastinate, aiomysql"]],
    # The drivers of a MariaDB database (asyncmy for the store, PyMySQL for migrations) and
    # the store itself, which imports asyncmy.
    "mariadb": [["python", "-c", "import asyncmy, pymysql, caravel.store.mariadb"]],
    # The broker bridges' clients, and the adapters and commands over them.
    "rabbitmq": [
        ["python", "-c", "import aio_pika, caravel.bridge.rabbitmq"],
        ["caravel", "bridge", "consume", "--help"],
    ],
    "nats": [["python", "-c", "import nats, caravel.bridge.brokers"]],
}

PLUGIN_TEST = """\
from dataclasses import dataclass

import pytest

from caravel import DispatchOptions, JobContext, JobRegistry
from caravel.testing import drain

registry = JobRegistry()


@dataclass(frozen=True)
class Ping:
    n: int


@registry.handles("tests.ping.v1", Ping)
async def ping(job: Ping, ctx: JobContext[None]) -> int:
    return job.n


@pytest.fixture
def caravel_registry() -> JobRegistry:
    return registry


@pytest.mark.asyncio
async def test_a_job_runs_on_the_plugins_queue(caravel_queue) -> None:
    await caravel_queue.enqueue(Ping(1), DispatchOptions(queue="pings"))
    assert [run.outcome for run in await drain(caravel_queue)] == ["completed"]
"""


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    return built_dist(tmp_path_factory)


def fresh_environment(folder: Path, requirement: str) -> dict[str, str]:
    """A new virtual environment with ``requirement`` installed; returns the environment
    variables of a shell that activated it."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(folder / ".venv")],
        check=True,
        capture_output=True,
    )
    python = folder / ".venv" / "bin" / "python"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", requirement],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"
    env["VIRTUAL_ENV"] = str(folder / ".venv")
    return env


def keep_promises(extra: str, folder: Path, env: dict[str, str]) -> None:
    work = folder / "work"
    work.mkdir()
    if extra == "testing":
        (work / "test_plugin.py").write_text(PLUGIN_TEST, encoding="utf-8")
    for argv in PROMISES[extra]:
        done = subprocess.run(
            argv, cwd=work, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}{done.stderr}"


@pytest.mark.parametrize("extra", list(PROMISES))
def test_the_wheel_installs_with_each_extra(extra: str, dist: Dist, tmp_path: Path) -> None:
    env = fresh_environment(tmp_path, f"{dist.wheel}[{extra}]" if extra else str(dist.wheel))
    keep_promises(extra, tmp_path, env)
    if extra == "web":  # the dashboard, its templates and static files served from the wheel
        port = free_port()
        url = f"sqlite:///{tmp_path / 'work' / 'queue.db'}"
        argv = ["caravel", "dashboard", "--url", url, "--bind", f"127.0.0.1:{port}"]
        page = served_page(argv, f"http://127.0.0.1:{port}/", cwd=tmp_path, env=env)
        assert "dashboard.css" in page


def test_every_extra_is_covered() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = set(config["project"]["optional-dependencies"])
    # [dev] is `make install`'s: the test tools, on top of
    # [samples,uvloop,django,mariadb,rabbitmq,nats].
    assert extras - {"dev"} == set(PROMISES) - {""}


def test_the_sdist_builds_and_installs(dist: Dist, tmp_path: Path) -> None:
    env = fresh_environment(tmp_path, str(dist.sdist))
    keep_promises("", tmp_path, env)


def test_the_wheel_holds_every_tracked_file_of_the_packages(dist: Dist) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "src/caravel", "samples"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    expected = {
        name.removeprefix("src/")
        if name.startswith("src/")
        else "caravel_samples/" + name.removeprefix("samples/")
        for name in listed
        if (ROOT / name).is_file()
    }
    with zipfile.ZipFile(dist.wheel) as wheel:
        missing = expected - set(wheel.namelist())
    assert not missing
