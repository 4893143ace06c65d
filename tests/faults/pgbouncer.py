"""A private PgBouncer in transaction pooling mode in front of a PostgreSQL server: its own
process, on a reserved port, with its configuration in a folder of its own (never the packaged
service). Like ``postgres``, ``pgbouncer`` refuses to run as root: under root it runs as the
``postgres`` OS user."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from tests.faults.ports import release_port, reserve_port

__all__ = ["BINARY", "PgBouncer", "pgbouncer_unavailable", "running_pgbouncer"]

BINARY = Path("/usr/sbin/pgbouncer")
OS_USER = "postgres"


def pgbouncer_unavailable() -> str | None:
    """Why no private PgBouncer can run here, or ``None``."""
    if not BINARY.is_file():
        return "pgbouncer is not installed (apt-get install pgbouncer)"
    return None


class PgBouncer:
    """A running private PgBouncer: :meth:`url` turns a server URL into one through it."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, folder: Path) -> None:
        self.process = process
        self.port = port
        self.folder = folder

    def url(self, server_url: str) -> str:
        """``server_url`` (same user and database) through this PgBouncer."""
        return str(make_url(server_url).set(host="127.0.0.1", port=self.port))

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def _config(folder: Path, port: int, server_url: str) -> Path:
    server = make_url(server_url)
    user = server.username or "postgres"
    (folder / "userlist.txt").write_text(f'"{user}" ""\n', encoding="utf-8")
    config = folder / "pgbouncer.ini"
    config.write_text(
        "\n".join(
            [
                "[databases]",
                f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {folder / 'userlist.txt'}",
                "pool_mode = transaction",
                "default_pool_size = 4",
                "max_client_conn = 500",
                f"logfile = {folder / 'pgbouncer.log'}",
                f"pidfile = {folder / 'pgbouncer.pid'}",
                # libpq's own startup parameters a client may send; a pooler shares the
                # server's session, so it cannot honour them and would otherwise refuse them.
                "ignore_startup_parameters = extra_float_digits, options",
                "",
            ]
        ),
        encoding="utf-8",
    )
    return config


def _accepting(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def running_pgbouncer(server_url: str) -> Iterator[PgBouncer]:
    """A private PgBouncer in front of ``server_url``'s server, its files in a temporary
    folder of its own (one the ``postgres`` user can reach, unlike pytest's); stopped, its
    folder removed and its port released on the way out."""
    folder = Path(tempfile.mkdtemp(prefix="caravel-pgbouncer-"))
    port = reserve_port()
    options: dict[str, Any] = {}
    if os.geteuid() == 0:
        shutil.chown(folder, OS_USER, OS_USER)
        options = {"user": OS_USER, "group": OS_USER, "extra_groups": []}
    config = _config(folder, port, server_url)
    process = subprocess.Popen(
        [str(BINARY), str(config)],
        cwd=folder,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **options,
    )
    try:
        deadline = time.monotonic() + 30
        while not _accepting(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"pgbouncer did not start:\n{PgBouncer(process, port, folder).log()}"
                )
            time.sleep(0.05)
        yield PgBouncer(process, port, folder)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        release_port(port)
        shutil.rmtree(folder, ignore_errors=True)
