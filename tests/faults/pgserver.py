"""Doing things to the PostgreSQL server itself: restarting it the hard way, turning a database
read-only, terminating sessions. The server is the local cluster managed by ``pg_ctlcluster``
(Debian's wrapper); every helper that stops it has a way back (:func:`ensure_running`), because
every other test needs the server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.databases import ADMIN_URL, IN_CI

__all__ = [
    "cluster",
    "control_unavailable",
    "ensure_running",
    "is_up",
    "kept_running",
    "read_only",
    "restart",
    "sessions",
    "set_read_only",
    "terminate_sessions",
]

CONFIG = Path("/etc/postgresql")


def _dsn(url: str, database: str | None = None) -> str:
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


def cluster() -> tuple[str, str] | None:
    """``(version, name)`` of the local cluster serving ``ADMIN_URL``'s port, if there is one."""
    if not CONFIG.is_dir():
        return None
    port = make_url(ADMIN_URL).port or 5432
    for version in sorted(CONFIG.iterdir(), reverse=True):
        for name in sorted(p.name for p in version.iterdir() if p.is_dir()):
            conf = version / name / "postgresql.conf"
            text = conf.read_text(errors="replace") if conf.exists() else ""
            ports = [
                line.split("=", 1)[1].split("#", 1)[0].strip()
                for line in text.splitlines()
                if line.strip().startswith("port")
            ]
            if not ports or ports[-1] == str(port):
                return version.name, name
    return None


def control_unavailable() -> str | None:
    """Why this process cannot restart the server (``None`` when it can)."""
    host = make_url(ADMIN_URL).host or "localhost"
    if host not in ("127.0.0.1", "localhost", "::1"):
        return f"the test server ({host}) is not local"
    if os.geteuid() != 0:
        return "restarting PostgreSQL needs root"
    if shutil.which("pg_ctlcluster") is None:
        return "pg_ctlcluster is not installed"
    if cluster() is None:
        return "no local PostgreSQL cluster under /etc/postgresql"
    return None


def require_control() -> None:
    """Skip (fail in CI) when the server cannot be controlled from here."""
    reason = control_unavailable()
    if reason is not None:
        message = f"cannot control the PostgreSQL server: {reason}"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def _ctl(action: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    found = cluster()
    assert found is not None, "no local PostgreSQL cluster"
    version, name = found
    return subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, name, action, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def is_up(timeout: float = 3.0) -> bool:
    """Whether the server accepts a connection right now."""
    try:
        with psycopg.connect(
            _dsn(ADMIN_URL, "postgres"), autocommit=True, connect_timeout=max(1, int(timeout))
        ) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def wait_up(timeout: float = 60.0) -> float:
    """Wait until the server accepts connections; return how long that took."""
    started = time.monotonic()
    while not is_up():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"PostgreSQL did not accept connections within {timeout}s")
        time.sleep(0.1)
    return time.monotonic() - started


def restart(mode: str = "immediate") -> float:
    """``pg_ctlcluster ... restart -m <mode>`` (``immediate`` is a crash: no checkpoint, crash
    recovery at start-up). Returns the seconds until the server accepted connections again."""
    started = time.monotonic()
    done = _ctl("restart", "-m", mode)
    if done.returncode != 0:
        ensure_running()
        raise AssertionError(f"pg_ctlcluster restart failed: {done.stderr or done.stdout}")
    wait_up()
    return time.monotonic() - started


def ensure_running() -> None:
    """Start the server if it is down (a no-op when it is up)."""
    if is_up():
        return
    if control_unavailable() is None:
        _ctl("start")
    wait_up()


@contextmanager
def kept_running() -> Iterator[None]:
    """Whatever happens inside, the server is up again afterwards."""
    try:
        yield
    finally:
        ensure_running()


def sessions(url: str, application_name: str = "caravel") -> int:
    """Sessions of ``url``'s database with that application name (other than ours)."""
    database = make_url(url).database
    with psycopg.connect(_dsn(url), autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = %s"
            " AND pid <> pg_backend_pid()",
            (database, application_name),
        ).fetchone()
    return int(row[0]) if row else 0


def terminate_sessions(url: str, application_name: str = "caravel") -> int:
    """``pg_terminate_backend`` every session of ``url``'s database with that application name;
    returns how many were terminated."""
    database = make_url(url).database
    with psycopg.connect(_dsn(ADMIN_URL, "postgres"), autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND application_name = %s AND pid <> pg_backend_pid()",
            (database, application_name),
        ).fetchall()
    return sum(1 for (ok,) in rows if ok)


def set_read_only(url: str, on: bool) -> None:
    """``ALTER DATABASE ... SET default_transaction_read_only``: sessions opened from now on
    start every transaction read-only (existing sessions keep their setting)."""
    database = make_url(url).database
    value = "on" if on else "off"
    with psycopg.connect(_dsn(ADMIN_URL, "postgres"), autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'ALTER DATABASE "{database}" SET default_transaction_read_only = {value}')


@contextmanager
def read_only(url: str, application_name: str = "caravel") -> Iterator[None]:
    """The database is read-only inside (its sessions with that application name are terminated
    on entry so that they reconnect read-only, and again on exit); writable again afterwards,
    whatever happens."""
    set_read_only(url, True)
    try:
        terminate_sessions(url, application_name)
        yield
    finally:
        set_read_only(url, False)
        terminate_sessions(url, application_name)
