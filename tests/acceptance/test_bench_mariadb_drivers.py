"""bench/mariadb_drivers.py, the measurement behind the choice of asyncmy, run at a tiny size so
that it keeps working; and the exceptions it provokes, which the store's error handling reads by
``args[0]``, are the ones its docstring and the choice assumed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.databases import MARIADB_ADMIN_URL, mariadb_database

pytestmark = [pytest.mark.slow, pytest.mark.mariadb]

ROOT = Path(__file__).resolve().parents[2]


def test_the_driver_bench_measures_and_names_each_error(tmp_path: Path) -> None:
    with mariadb_database(migrated=False):
        pass  # the server is reachable (else skipped, or failed under CI=true)
    out = tmp_path / "drivers.json"
    argv = [sys.executable, "-m", "bench.mariadb_drivers", "--url", MARIADB_ADMIN_URL]
    argv += ["--commits", "5", "--selects", "1", "--rounds", "1", "--errors", "--json", str(out)]
    argv += ["--only", "asyncmy", "pymysql"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(out.read_text(encoding="utf-8"))

    assert found["server"]["innodb_flush_log_at_trx_commit"] in (0, 1, 2)
    assert set(found["figures"]) == {
        "asyncmy (SQLAlchemy)",
        "asyncmy (bare)",
        "pymysql (SQLAlchemy)",
        "pymysql (bare)",
    }
    for figures in found["figures"].values():
        assert figures["commits_per_s"] > 0
        assert figures["cpu_us_per_commit"] > 0
        assert figures["select_ms"] > 0

    bare, wrapped = found["errors"]["asyncmy (bare)"], found["errors"]["asyncmy (SQLAlchemy)"]
    expected = {
        "duplicate key (1062)": ("asyncmy.errors.IntegrityError", {1062}),
        "lock wait timeout (1205)": ("asyncmy.errors.OperationalError", {1205}),
        "deadlock (1213)": ("asyncmy.errors.OperationalError", {1213}),
        "killed during a query": ("asyncmy.errors.OperationalError", {2013}),
        "killed while idle": ("asyncmy.errors.OperationalError", {2006, 2013}),
        "connection refused (2003)": ("asyncmy.errors.OperationalError", {2003}),
    }
    for what, (driver_class, codes) in expected.items():
        assert bare[what]["class"] == driver_class, what
        assert bare[what]["code"] in codes, what
        # Through SQLAlchemy: its own class, the driver's exception and code inside.
        assert wrapped[what]["driver_class"] == driver_class, what
        assert wrapped[what]["code"] in codes, what
    assert wrapped["duplicate key (1062)"]["class"] == "sqlalchemy.exc.IntegrityError"
    assert wrapped["deadlock (1213)"]["class"] == "sqlalchemy.exc.OperationalError"
    # A connection the server ended is taken for lost, so the pool drops it.
    assert wrapped["killed during a query"]["invalidated"] is True
    assert wrapped["killed while idle"]["invalidated"] is True
    assert wrapped["deadlock (1213)"]["invalidated"] is False
