"""A PostgreSQL cluster of the test session's own, for the tests that do things to the server
itself: restarting it the hard way, turning a database read-only, terminating sessions.

The machine's PostgreSQL server (``ADMIN_URL``) is shared with every other test, and often with
other test runs on the same machine, so nothing here ever touches it. :meth:`PrivateCluster.create`
runs ``initdb`` into a new temporary folder and starts the cluster on a free port of
``127.0.0.1`` (trust authentication, superuser ``postgres``, its socket in that folder);
:meth:`PrivateCluster.destroy` stops it and removes the folder. ``postgres`` refuses to run as
root, so under root the cluster belongs to the ``postgres`` OS user. Every helper that acts on a
database first checks that the database lives on this cluster.

The binaries are found in ``CARAVEL_TEST_PG_BINDIR``, else next to ``initdb`` on the ``PATH``,
else in the newest ``/usr/lib/postgresql/*/bin``. The ``pg_cluster`` fixture
(``tests/faults/conftest.py``) makes one per test process; when it cannot, the tests that need
it are skipped, or fail under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from tests.faults.ports import pid_alive, release_port, reserve_port

__all__ = ["PrivateCluster", "cluster_unavailable", "find_bindir"]

SUPERUSER = "postgres"
OS_USER = "postgres"  # who runs the cluster when the tests run as root
PREFIX = "caravel-pg-"
#: Settings of the private cluster: loopback only, its own socket folder, no fsync (a crash of
#: the server process, which is what the tests do, loses nothing without it; only a machine
#: crash would, and the cluster is thrown away anyway).
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "200",
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",
    "log_min_messages": "warning",
}


def find_bindir() -> Path | None:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``, if there is one."""
    configured = os.environ.get("CARAVEL_TEST_PG_BINDIR")
    if configured:  # when set, the only place looked at
        candidates = [Path(configured)]
    else:
        initdb = shutil.which("initdb")
        candidates = [Path(initdb).resolve().parent] if initdb is not None else []
        base = Path("/usr/lib/postgresql")
        if base.is_dir():
            versions = sorted(
                (p for p in base.iterdir() if p.name.isdigit()),
                key=lambda p: int(p.name),
                reverse=True,
            )
            candidates += [p / "bin" for p in versions]
    for folder in candidates:
        if all((folder / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


def _as_root() -> bool:
    return os.geteuid() == 0


def cluster_unavailable() -> str | None:
    """Why a private cluster cannot be made here (``None`` when it can be tried)."""
    if find_bindir() is None:
        return "initdb, pg_ctl and postgres were not found (set CARAVEL_TEST_PG_BINDIR)"
    if _as_root():
        try:
            import pwd

            pwd.getpwnam(OS_USER)
        except KeyError:
            return f"running as root, and there is no {OS_USER!r} OS user to run PostgreSQL as"
    return None


class PrivateCluster:
    """One throwaway PostgreSQL cluster: ``root/data``, listening on ``127.0.0.1:port``."""

    def __init__(
        self, root: Path, bindir: Path, port: int, settings: dict[str, str] | None = None
    ) -> None:
        self.root = root
        self.data = root / "data"
        self.log_path = root / "server.log"
        self.bindir = bindir
        self.port = port
        #: Server settings on top of :data:`SETTINGS` (values as written in a config file).
        self.settings = dict(settings or {})

    # ----- making and unmaking ---------------------------------------------------------------

    @classmethod
    def create(cls, attempts: int = 5, settings: dict[str, str] | None = None) -> PrivateCluster:
        """initdb into a new temporary folder and start the cluster on a free port (another
        port when the chosen one was taken meanwhile), with ``settings`` on top of
        :data:`SETTINGS`. Raises ``RuntimeError`` on failure."""
        return cls.make(lambda cluster: cluster._initdb(), attempts=attempts, settings=settings)

    @classmethod
    def make(
        cls,
        fill: Callable[[PrivateCluster], None],
        *,
        attempts: int = 5,
        settings: dict[str, str] | None = None,
    ) -> PrivateCluster:
        """A new cluster whose data folder ``fill`` writes (``initdb``, or a base backup of
        another cluster), started on a free port. Raises ``RuntimeError`` on failure."""
        reason = cluster_unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        bindir = find_bindir()
        assert bindir is not None
        cleanup_stale()
        root = Path(tempfile.mkdtemp(prefix=PREFIX))
        (root / "owner").write_text(str(os.getpid()), encoding="utf-8")
        if _as_root():
            shutil.chown(root, OS_USER, OS_USER)
        cluster = cls(root, bindir, 0, settings)
        try:
            fill(cluster)
            for attempt in range(attempts):
                release_port(cluster.port)
                cluster.port = reserve_port()
                cluster._configure()
                done = cluster._ctl("start", "-w", "-t", "60", "-l", str(cluster.log_path))
                if done.returncode == 0:
                    cluster.wait_up()
                    return cluster
                if attempt == attempts - 1:
                    raise RuntimeError(
                        f"pg_ctl start failed: {done.stderr or done.stdout}\n{cluster.server_log()}"
                    )
        except BaseException:
            cluster.destroy()
            raise
        raise AssertionError("unreachable")

    def destroy(self) -> None:
        """Stop the cluster (immediately: nothing in it is kept) and remove its folder."""
        if (self.data / "postmaster.pid").exists():
            if self.postmaster() is None:
                self._remove_shared_memory()  # killed: nobody else will remove it
            else:
                self._ctl("stop", "-m", "immediate", "-w", "-t", "60")
        shutil.rmtree(self.root, ignore_errors=True)
        release_port(self.port)

    def run(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """One of the cluster's binaries (``args[0]``, such as ``pg_basebackup``), run as the
        cluster's owner in its folder, without the caller's ``PG*`` environment."""
        return self._run(*args, timeout=timeout)

    def _run(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        options: dict[str, Any] = {}
        if _as_root():
            options = {"user": OS_USER, "group": OS_USER, "extra_groups": []}
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        return subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            cwd=self.root,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **options,
        )

    def _initdb(self) -> None:
        done = self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            SUPERUSER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr or done.stdout}")

    def _configure(self) -> None:
        settings = {
            **SETTINGS,
            **self.settings,
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
        }
        lines = [f"{name} = {value}" for name, value in settings.items()]
        (self.data / "postgresql.auto.conf").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def _ctl(self, action: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run("pg_ctl", action, "-D", str(self.data), *args)

    def server_log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-4000:]
        except OSError:
            return ""

    # ----- addresses ---------------------------------------------------------------------------

    @property
    def admin_url(self) -> str:
        """The superuser's URL to the ``postgres`` database (what ``tests.support.databases``
        calls an admin URL: new databases are created through it)."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def owns(self, url: str) -> bool:
        parsed = make_url(url)
        return parsed.host in ("127.0.0.1", "localhost") and parsed.port == self.port

    def _own(self, url: str) -> str:
        """``url`` as a libpq DSN, after checking that it is a database of this cluster."""
        if not self.owns(url):
            raise AssertionError(
                f"{make_url(url).render_as_string()} is not on the private cluster "
                f"(127.0.0.1:{self.port}); the shared server is never touched"
            )
        parsed = make_url(url).set(drivername="postgresql")
        return parsed.render_as_string(hide_password=False)

    def _admin_dsn(self) -> str:
        return make_url(self.admin_url).render_as_string(hide_password=False)

    @contextlib.contextmanager
    def database(self, *, migrated: bool) -> Iterator[str]:
        """A new database on this cluster (migrated to the queue schema when asked)."""
        from tests.support.databases import pg_database

        with pg_database(migrated=migrated, admin_url=self.admin_url) as url:
            yield url

    # ----- the server's life -------------------------------------------------------------------

    def is_up(self, timeout: float = 3.0) -> bool:
        """Whether this cluster (not some other server on its port) accepts a connection right
        now."""
        try:
            with psycopg.connect(
                self._admin_dsn(), autocommit=True, connect_timeout=max(1, int(timeout))
            ) as conn:
                row = conn.execute("SHOW data_directory").fetchone()
        except psycopg.Error:
            return False
        return row is not None and Path(row[0]).resolve() == self.data.resolve()

    def wait_up(self, timeout: float = 60.0) -> float:
        """Wait until the cluster accepts connections; return how long that took."""
        started = time.monotonic()
        while not self.is_up():
            if time.monotonic() - started > timeout:
                raise AssertionError(
                    f"the private PostgreSQL cluster did not accept connections within "
                    f"{timeout}s; its log:\n{self.server_log()}"
                )
            time.sleep(0.1)  # polling a real server until it accepts connections
        return time.monotonic() - started

    def restart(self, mode: str = "immediate") -> float:
        """``pg_ctl restart -m <mode>`` (``immediate`` is a crash: no checkpoint, crash recovery
        at start-up). Returns the seconds until the cluster accepted connections again."""
        started = time.monotonic()
        done = self._ctl("restart", "-m", mode, "-w", "-t", "120", "-l", str(self.log_path))
        if done.returncode != 0:
            self.ensure_running()
            raise AssertionError(f"pg_ctl restart failed: {done.stderr or done.stdout}")
        self.wait_up()
        return time.monotonic() - started

    def stop(self, mode: str = "fast") -> None:
        done = self._ctl("stop", "-m", mode, "-w", "-t", "120")
        if done.returncode != 0:
            raise AssertionError(f"pg_ctl stop failed: {done.stderr or done.stdout}")

    def start(self) -> None:
        done = self._ctl("start", "-w", "-t", "120", "-l", str(self.log_path))
        if done.returncode != 0:
            raise AssertionError(f"pg_ctl start failed: {done.stderr or done.stdout}")
        self.wait_up()

    def ensure_running(self) -> None:
        """Start the cluster if it is down (a no-op when it is up)."""
        if self.is_up():
            return
        if self._ctl("status").returncode != 0:  # not running at all (3), or no data folder
            self._ctl("start", "-w", "-t", "120", "-l", str(self.log_path))
        self.wait_up()

    def postmaster(self) -> int | None:
        """The process id of this cluster's running postmaster, if there is one."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.data / "postmaster.pid").read_text(encoding="utf-8").split()[0])
            if Path(f"/proc/{pid}/cwd").resolve() == self.data.resolve():
                return pid
        return None

    def kill(self) -> None:
        """SIGKILL the postmaster and every process it started, at once, as a machine that
        lost power would stop: no shutdown checkpoint, no goodbye to clients or standbys."""
        postmaster = self.postmaster()
        if postmaster is None:
            raise AssertionError(f"the private cluster on port {self.port} is not running")
        children = _children(postmaster)
        os.kill(postmaster, signal.SIGKILL)
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        for pid in [postmaster, *children]:
            for _ in range(200):
                if not pid_alive(pid) or _zombie(pid):
                    break
                time.sleep(0.01)  # a real process, given 2 s to die

    def _remove_shared_memory(self) -> None:
        """Remove the System V segment a killed postmaster left (its key is on line 7 of
        ``postmaster.pid``: the key, then the segment's id)."""
        with contextlib.suppress(OSError, ValueError, IndexError, subprocess.SubprocessError):
            lines = (self.data / "postmaster.pid").read_text(encoding="utf-8").splitlines()
            shmid = int(lines[6].split()[1])
            subprocess.run(["ipcrm", "-m", str(shmid)], capture_output=True, check=False)

    def promote(self, timeout: float = 60.0) -> float:
        """Promote this standby to a primary (``pg_ctl promote``, waiting until it accepts
        writes); returns the seconds that took."""
        started = time.monotonic()
        done = self._ctl("promote", "-w", "-t", str(int(timeout)))
        if done.returncode != 0:
            raise AssertionError(f"pg_ctl promote failed: {done.stderr or done.stdout}")
        while self.in_recovery():
            if time.monotonic() - started > timeout:
                raise AssertionError(f"not promoted after {timeout}s:\n{self.server_log()}")
            time.sleep(0.02)  # a real server finishing its promotion
        return time.monotonic() - started

    def in_recovery(self) -> bool:
        """Whether the cluster is a standby (``pg_is_in_recovery()``)."""
        return bool(self.admin_query("SELECT pg_is_in_recovery()")[0][0])

    def admin_query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One statement as the superuser in the ``postgres`` database, autocommit."""
        with psycopg.connect(self._admin_dsn(), autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description is not None else []

    @contextlib.contextmanager
    def kept_running(self) -> Iterator[None]:
        """Whatever happens inside, the cluster is up again afterwards."""
        try:
            yield
        finally:
            self.ensure_running()

    # ----- sessions and settings of one of its databases ---------------------------------------

    def sessions(self, url: str, application_name: str = "caravel") -> int:
        """Sessions of ``url``'s database with that application name (other than ours)."""
        database = make_url(url).database
        with psycopg.connect(self._own(url), autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
                " AND application_name = %s AND pid <> pg_backend_pid()",
                (database, application_name),
            ).fetchone()
        return int(row[0]) if row else 0

    def terminate_sessions(self, url: str, application_name: str = "caravel") -> int:
        """``pg_terminate_backend`` every session of ``url``'s database with that application
        name; returns how many were terminated."""
        self._own(url)
        database = make_url(url).database
        with psycopg.connect(self._admin_dsn(), autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND application_name = %s AND pid <> pg_backend_pid()",
                (database, application_name),
            ).fetchall()
        return sum(1 for (ok,) in rows if ok)

    def set_read_only(self, url: str, on: bool) -> None:
        """``ALTER DATABASE ... SET default_transaction_read_only``: sessions opened from now
        on start every transaction read-only (existing sessions keep their setting)."""
        self._own(url)
        database = make_url(url).database
        value = "on" if on else "off"
        with psycopg.connect(self._admin_dsn(), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'ALTER DATABASE "{database}" SET default_transaction_read_only = {value}')

    @contextlib.contextmanager
    def read_only(self, url: str, application_name: str = "caravel") -> Iterator[None]:
        """The database is read-only inside (its sessions with that application name are
        terminated on entry so that they reconnect read-only, and again on exit); writable
        again afterwards, whatever happens."""
        self.set_read_only(url, True)
        try:
            self.terminate_sessions(url, application_name)
            yield
        finally:
            self.set_read_only(url, False)
            self.terminate_sessions(url, application_name)


def _children(parent: int) -> list[int]:
    """Processes whose parent is ``parent`` (read from ``/proc``)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The command name, in parentheses, may hold spaces: the fields after it are plain.
            fields = stat.read_text(encoding="utf-8").rsplit(")", 1)[1].split()
            if int(fields[1]) == parent:
                found.append(int(stat.parent.name))
    return found


def _zombie(pid: int) -> bool:
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
        return stat.rsplit(")", 1)[1].split()[0] == "Z"
    return False


def cleanup_stale() -> None:
    """Stop and remove private clusters left behind by test processes that no longer exist (a
    run killed before its fixtures could finish). Clusters of live processes are left alone."""
    for root in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            owner = int((root / "owner").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if pid_alive(owner):
            continue
        pidfile = root / "data" / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, IndexError):
            postmaster = int(pidfile.read_text(encoding="utf-8").split()[0])
            if (root / "data").resolve() == Path(f"/proc/{postmaster}/cwd").resolve():
                os.kill(postmaster, signal.SIGQUIT)  # an immediate shutdown
                for _ in range(100):
                    if not pid_alive(postmaster):
                        break
                    time.sleep(0.05)  # a real process, given 5 s to exit
        shutil.rmtree(root, ignore_errors=True)
