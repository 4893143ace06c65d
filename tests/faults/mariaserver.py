"""A MariaDB server of the test session's own, for the tests that do things to the server
itself: stopping it, killing it with SIGKILL, starting it again under load.

The machine's MariaDB server (``MARIADB_ADMIN_URL``) is shared with every other test, and often
with other test runs on the same machine, so nothing here ever touches it.
:meth:`PrivateMariadb.create` runs ``mariadb-install-db`` into a new temporary folder and starts
``mariadbd`` on a free port of ``127.0.0.1`` (user ``root`` with an empty password, its socket,
pid file and log in that folder); :meth:`PrivateMariadb.destroy` kills it and removes the
folder. Under root, ``mariadbd`` refuses to start unless told ``--user=root``: the server then
runs as root and owns its files, which the folder's removal needs anyway (PostgreSQL, which
cannot run as root at all, gets an OS user of its own in :mod:`tests.faults.pgserver`).

The binaries are found in ``CARAVEL_TEST_MARIADB_BINDIR``, else on the ``PATH``, else in
``/usr/sbin`` and ``/usr/bin`` (Debian puts ``mariadbd`` in the first, ``mariadb-install-db``
in the second). A fixture that cannot make one skips its tests, or fails them under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
from sqlalchemy.engine import make_url

from tests.faults.ports import pid_alive, release_port, reserve_port

__all__ = ["PrivateMariadb", "find_binaries", "server_unavailable"]

SUPERUSER = "root"
PREFIX = "caravel-maria-"
SERVER = "mariadbd"
INSTALL = "mariadb-install-db"
#: Settings of the private server, small so that it starts in a second or two. The redo log is
#: written at every commit and flushed about once a second (``innodb_flush_log_at_trx_commit=2``):
#: a killed ``mariadbd``, which is what the tests do, loses nothing committed, since the log is
#: in the OS's cache; only a machine crash would, and the server is thrown away anyway. The
#: doublewrite buffer guards against torn pages in such a crash, so it is off too.
SETTINGS = {
    "bind-address": "127.0.0.1",
    "skip-name-resolve": "",
    "character-set-server": "utf8mb4",
    "collation-server": "utf8mb4_nopad_bin",
    "max-connections": "200",
    "innodb-buffer-pool-size": "32M",
    "innodb-log-file-size": "16M",
    "innodb-flush-log-at-trx-commit": "2",
    "innodb-doublewrite": "0",
}


def find_binaries() -> tuple[Path, Path] | None:
    """``mariadbd`` and ``mariadb-install-db``, if both are here."""
    configured = os.environ.get("CARAVEL_TEST_MARIADB_BINDIR")
    if configured:  # when set, the only place looked at
        folders = [Path(configured)]
    else:
        on_path = [shutil.which(tool) for tool in (SERVER, INSTALL)]
        folders = [Path(found).resolve().parent for found in on_path if found is not None]
        folders += [Path("/usr/sbin"), Path("/usr/bin")]
    server = next((f / SERVER for f in folders if (f / SERVER).is_file()), None)
    install = next((f / INSTALL for f in folders if (f / INSTALL).is_file()), None)
    return (server, install) if server is not None and install is not None else None


def _as_root() -> bool:
    return os.geteuid() == 0


def server_unavailable() -> str | None:
    """Why a private server cannot be made here (``None`` when it can be tried)."""
    if find_binaries() is None:
        return (
            f"{SERVER} and {INSTALL} were not found (install Debian's mariadb-server, or set "
            "CARAVEL_TEST_MARIADB_BINDIR)"
        )
    return None


class PrivateMariadb:
    """One throwaway MariaDB server: ``root/data``, listening on ``127.0.0.1:port``."""

    def __init__(self, root: Path, server: Path, install: Path, port: int) -> None:
        self.root = root
        self.data = root / "data"
        self.socket = root / "mariadbd.sock"
        self.pid_path = root / "mariadbd.pid"
        self.log_path = root / "server.log"
        self.server = server
        self.install = install
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    # ----- making and unmaking ---------------------------------------------------------------

    @classmethod
    def create(cls, attempts: int = 5) -> PrivateMariadb:
        """mariadb-install-db into a new temporary folder and start the server on a free port
        (another port when the chosen one was taken meanwhile). Raises ``RuntimeError`` on
        failure."""
        reason = server_unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        found = find_binaries()
        assert found is not None
        cleanup_stale()
        root = Path(tempfile.mkdtemp(prefix=PREFIX))
        (root / "owner").write_text(str(os.getpid()), encoding="utf-8")
        server = cls(root, *found, 0)
        try:
            server._install_db()
            for attempt in range(attempts):
                release_port(server.port)
                server.port = reserve_port()
                server._spawn()
                try:
                    server.wait_up()
                    return server
                except AssertionError as exc:
                    if server.running():  # up but not answering: no port clash, a real failure
                        raise
                    if attempt == attempts - 1:
                        log = server.server_log()
                        raise RuntimeError(f"mariadbd did not start:\n{log}") from exc
        except BaseException:
            server.destroy()
            raise
        raise AssertionError("unreachable")

    def destroy(self) -> None:
        """Kill the server (nothing in it is kept) and remove its folder."""
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)
        release_port(self.port)

    def _user(self) -> list[str]:
        return ["--user=root"] if _as_root() else []

    def _install_db(self) -> None:
        done = subprocess.run(
            [
                str(self.install),
                "--no-defaults",
                *self._user(),
                f"--datadir={self.data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
                *(self._settings()),
            ],
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{INSTALL} failed: {done.stderr or done.stdout}")

    def _settings(self) -> list[str]:
        return [f"--{name}={value}" if value else f"--{name}" for name, value in SETTINGS.items()]

    def _spawn(self) -> None:
        """Start ``mariadbd`` in the background (its own session, so that a Ctrl-C meant for
        the tests does not reach it); it logs to ``server.log``."""
        self.process = subprocess.Popen(
            [
                str(self.server),
                "--no-defaults",  # first: nothing from /etc/mysql, which is the shared server's
                *self._user(),
                f"--datadir={self.data}",
                f"--port={self.port}",
                f"--socket={self.socket}",
                f"--pid-file={self.pid_path}",
                f"--log-error={self.log_path}",
                *self._settings(),
            ],
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def server_log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-4000:]
        except OSError:
            return ""

    # ----- addresses ---------------------------------------------------------------------------

    @property
    def admin_url(self) -> str:
        """The superuser's URL, without a database (what ``tests.support.databases`` calls an
        admin URL: new databases are created through it)."""
        return f"mariadb://{SUPERUSER}@127.0.0.1:{self.port}"

    def owns(self, url: str) -> bool:
        parsed = make_url(url)
        return parsed.host in ("127.0.0.1", "localhost") and parsed.port == self.port

    @contextlib.contextmanager
    def database(self, *, migrated: bool) -> Iterator[str]:
        """A new database on this server (migrated to the queue schema when asked)."""
        from tests.support.databases import mariadb_database

        with mariadb_database(migrated=migrated, admin_url=self.admin_url) as url:
            yield url

    # ----- the server's life -------------------------------------------------------------------

    def running(self) -> bool:
        """Whether the ``mariadbd`` this object started is still alive (reaping it if not)."""
        return self.process is not None and self.process.poll() is None

    def is_up(self, timeout: float = 3.0) -> bool:
        """Whether this server (not some other one on its port) accepts a connection right
        now."""
        try:
            conn = pymysql.connect(
                host="127.0.0.1",
                port=self.port,
                user=SUPERUSER,
                password="",
                connect_timeout=max(1, int(timeout)),
                read_timeout=max(1, int(timeout)),
            )
        # Any failure to connect means "not up". Not only PyMySQL's own error class: once, in a
        # full run, a refused connection escaped ``except pymysql.err.Error`` here and failed
        # the fixture (why its class did not match is not known yet).
        except Exception:
            return False
        with conn, conn.cursor() as cursor:
            try:
                cursor.execute("SELECT @@socket")
                row = cursor.fetchone()
            except pymysql.err.Error:
                return False
        # Another server on this port (ours exited on a port clash) is not ours.
        return row is not None and row[0] == str(self.socket)

    def wait_up(self, timeout: float = 60.0) -> float:
        """Wait until the server accepts connections; return how long that took."""
        started = time.monotonic()
        while not self.is_up():
            if not self.running():
                raise AssertionError(
                    f"the private MariaDB server exited while starting; its log:\n"
                    f"{self.server_log()}"
                )
            if time.monotonic() - started > timeout:
                raise AssertionError(
                    f"the private MariaDB server did not accept connections within "
                    f"{timeout}s; its log:\n{self.server_log()}"
                )
            time.sleep(0.1)  # polling a real server until it accepts connections
        return time.monotonic() - started

    def stop(self, timeout: float = 120.0) -> None:
        """A clean shutdown (SIGTERM: InnoDB flushes and closes), waited for."""
        if not self.running():
            return
        assert self.process is not None
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"mariadbd did not stop within {timeout}s of SIGTERM; its log:\n{self.server_log()}"
            ) from None

    def kill(self) -> None:
        """SIGKILL, a crash: InnoDB recovers from its redo log at the next start."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()

    def start(self) -> None:
        """Start the stopped or killed server on the same port and data, and wait until it
        accepts connections."""
        if self.running():
            raise AssertionError("the private MariaDB server is already running")
        self._spawn()
        self.wait_up()

    def restart(self, *, crash: bool = True) -> float:
        """SIGKILL (``crash``) or a clean stop, then start again. Returns the seconds until the
        server accepted connections again."""
        started = time.monotonic()
        if crash:
            self.kill()
        else:
            self.stop()
        self.start()
        return time.monotonic() - started

    def ensure_running(self) -> None:
        """Start the server if it is down (a no-op when it is up); a server that is running
        but not answering (stopped with SIGSTOP, say) is resumed first."""
        if self.running():
            assert self.process is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGCONT)
            self.wait_up()
            return
        self.start()

    @contextlib.contextmanager
    def kept_running(self) -> Iterator[None]:
        """Whatever happens inside, the server is up again afterwards."""
        try:
            yield
        finally:
            self.ensure_running()

    # ----- sessions of one of its databases ----------------------------------------------------

    def _connect(self) -> Any:
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user=SUPERUSER,
            password="",
            autocommit=True,
            connect_timeout=5,
            read_timeout=30,
        )

    def _database(self, url: str) -> str:
        if not self.owns(url):
            raise AssertionError(f"{url} is not a database of this private server")
        database = make_url(url).database
        assert database, url
        return database

    def _session_ids(self, cursor: Any, url: str) -> list[int]:
        cursor.execute(
            "SELECT ID FROM information_schema.PROCESSLIST"
            " WHERE DB = %s AND ID <> CONNECTION_ID() AND COMMAND <> 'Killed'",
            (self._database(url),),
        )
        return [int(row[0]) for row in cursor.fetchall()]

    def sessions(self, url: str) -> int:
        """Sessions in ``url``'s database (other than ours)."""
        with self._connect() as conn, conn.cursor() as cursor:
            return len(self._session_ids(cursor, url))

    def restricted_url(self, url: str, user: str = "caravel_rw") -> str:
        """``url`` as ``user`` (made if missing, no password), who may do anything in that
        database and nothing server-wide: unlike ``root``, a session of its obeys
        :meth:`read_only`."""
        database = self._database(url)
        with self._connect() as conn, conn.cursor() as cursor:
            cursor.execute(f"CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1'")
            cursor.execute(f"GRANT ALL PRIVILEGES ON `{database}`.* TO '{user}'@'127.0.0.1'")
        return make_url(url).set(username=user).render_as_string(hide_password=False)

    def set_read_only(self, on: bool) -> None:
        """``SET GLOBAL read_only``: from now on the server refuses every write of a session
        without the ``READ_ONLY ADMIN`` privilege (:meth:`restricted_url`'s user, not root)."""
        with self._connect() as conn, conn.cursor() as cursor:
            cursor.execute(f"SET GLOBAL read_only = {'ON' if on else 'OFF'}")

    @contextlib.contextmanager
    def read_only(self, url: str) -> Iterator[None]:
        """The server is read-only inside for :meth:`restricted_url`'s sessions (those in
        ``url``'s database are killed on entry, so that none finishes a write it began
        before, and again on exit); writable again afterwards, whatever happens."""
        self.set_read_only(True)
        try:
            self.terminate_sessions(url)
            yield
        finally:
            self.set_read_only(False)
            self.terminate_sessions(url)

    def terminate_sessions(self, url: str) -> int:
        """``KILL CONNECTION`` every session in ``url``'s database; returns how many were
        killed. (Every client of the fault suite's queue database is a worker's: the handlers
        write to the app database, another one.)"""
        killed = 0
        with self._connect() as conn, conn.cursor() as cursor:
            for session in self._session_ids(cursor, url):
                try:
                    cursor.execute(f"KILL CONNECTION {session}")
                except pymysql.err.OperationalError:  # it ended meanwhile
                    continue
                killed += 1
        return killed


def cleanup_stale() -> None:
    """Kill and remove private servers left behind by test processes that no longer exist (a
    run killed before its fixtures could finish). Servers of live processes are left alone."""
    for root in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            owner = int((root / "owner").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if pid_alive(owner):
            continue
        with contextlib.suppress(OSError, ValueError):
            pid = int((root / "mariadbd.pid").read_text(encoding="utf-8").split()[0])
            # Only a mariadbd serving this very folder (a pid may have been reused meanwhile).
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if f"--datadir={root / 'data'}".encode() in command:
                os.kill(pid, signal.SIGKILL)
                for _ in range(100):
                    if not pid_alive(pid):
                        break
                    time.sleep(0.05)  # a real process, given 5 s to go
        shutil.rmtree(root, ignore_errors=True)
