"""``caravel dashboard``: serve the operations dashboard with uvicorn.

The web extra (Starlette, Jinja2, uvicorn) is imported only when the command runs, so the rest
of the command line works without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import socket
from datetime import timedelta
from typing import Annotated, Any

import typer

from caravel.cli.apps import load_attribute
from caravel.cli.connect import open_inspector
from caravel.cli.failure import exit_code
from caravel.cli.opening import explain
from caravel.cli.options import DatabaseUrl
from caravel.errors import CaravelError

__all__ = ["checked_bind", "dashboard", "load_authorize", "parse_bind", "serve"]


def _say(message: str) -> None:
    typer.echo(message, err=True)


def parse_bind(value: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) -> (host, port). Raises ``ValueError``."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError("must look like 127.0.0.1:8765")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError("the port must be from 1 to 65535")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError("the host must be an IP address or localhost") from None
    return host, port


def _loopback(host: str) -> bool:
    return host == "localhost" or ipaddress.ip_address(host).is_loopback


def _load_authorize(path: str) -> Any:
    target = load_attribute(path, "--authorize", "function")
    if not callable(target):
        raise ValueError(f"--authorize: {path!r} is not a function")
    return target


def dashboard(
    url: DatabaseUrl,
    read_url: Annotated[
        str | None,
        typer.Option(
            "--read-url",
            envvar="CARAVEL_READ_DATABASE_URL",
            show_envvar=True,
            metavar="URL",
            help="Read the pages from this database instead, such as a streaming standby of "
            "--url (opened read-only); every change still goes to --url.",
        ),
    ] = None,
    bind: Annotated[
        str,
        typer.Option(
            metavar="HOST:PORT",
            help="Address and port to listen on ([::1]:port for IPv6).",
        ),
    ] = "127.0.0.1:8765",
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote",
            help="Allow listening on an address other machines can reach. Without --authorize "
            "their requests are refused anyway.",
        ),
    ] = False,
    authorize: Annotated[
        str | None,
        typer.Option(
            metavar="MODULE:FUNCTION",
            help="The function deciding who may read and replay (see the dashboard guide). "
            "Without it only requests from this machine are answered.",
        ),
    ] = None,
    refresh: Annotated[
        int,
        typer.Option(
            min=0,
            max=3600,
            metavar="SECONDS",
            help="Seconds between page updates (0-3600); 0 turns them off.",
        ),
    ] = 5,
    lost_after: Annotated[
        float,
        typer.Option(
            metavar="SECONDS",
            help="Seconds without a heartbeat before a worker counts as lost.",
        ),
    ] = 60.0,
) -> None:
    """Serve the operations dashboard.

    Queue counts, jobs, dead letters (with replay) and workers. Listens on loopback only unless
    --allow-remote is given.
    """
    host, port = checked_bind("dashboard", bind, allow_remote)
    if lost_after <= 0:
        _say("caravel dashboard: --lost-after must be positive")
        raise typer.Exit(2)
    try:
        import uvicorn  # noqa: F401  (serve imports it; missing, the extra is not installed)

        from caravel.web import dashboard as build
    except ImportError:
        _say(
            "caravel dashboard: the web extra is not installed; "
            "run: pip install 'caravel-queue[web]'"
        )
        raise typer.Exit(2) from None
    check = load_authorize("dashboard", authorize)

    async def schema_ready(target: str) -> None:
        async with open_inspector(target) as reader:
            await reader.check_schema()

    # Both must be migrated; an error names the one whose check failed.
    checking = url

    try:
        for checking in (url,) if read_url is None else (url, read_url):
            asyncio.run(schema_ready(checking))
        app = build(
            url,
            read_url=read_url,
            authorize=check,
            refresh_seconds=refresh,
            lost_after=timedelta(seconds=lost_after),
        )
    except CaravelError as exc:  # 2 for a missing file or an unmigrated queue, 1 otherwise
        _say(f"caravel dashboard: {explain(exc, checking) or exc}")
        raise typer.Exit(exit_code(exc)) from None
    who = "requests decided by " + authorize if authorize else "requests from this machine only"
    if check is None and not _loopback(host):
        _say("caravel dashboard: no --authorize: requests from other machines will be refused")
    serve("dashboard", app, host, port, f"/ ({who})")


def checked_bind(command: str, bind: str, allow_remote: bool) -> tuple[str, int]:
    """``--bind``'s host and port, or exit 2 saying why not: a malformed value, or an address
    other machines can reach without ``--allow-remote``."""
    try:
        host, port = parse_bind(bind)
    except ValueError as exc:
        _say(f"caravel {command}: --bind {exc}")
        raise typer.Exit(2) from None
    if not _loopback(host) and not allow_remote:
        _say(
            f"caravel {command}: refusing to listen on {host}, which other machines can reach; "
            "use a loopback address, or add --allow-remote (and --authorize)"
        )
        raise typer.Exit(2)
    return host, port


def load_authorize(command: str, authorize: str | None) -> Any:
    """The ``--authorize`` function, or exit 2 saying why it cannot be loaded."""
    try:
        return _load_authorize(authorize) if authorize is not None else None
    except ValueError as exc:  # ValidationError included
        _say(f"caravel {command}: {exc}")
        raise typer.Exit(2) from None


def serve(command: str, app: Any, host: str, port: int, what: str) -> None:
    """Serve ``app`` with uvicorn on ``host:port`` until Ctrl+C, saying on standard error that
    it serves ``what`` (the path and who may ask). A port that cannot be taken exits 1."""
    import uvicorn

    shown = f"[{host}]" if ":" in host else host
    try:
        listening = _listen(host, port)
    except OSError as exc:
        busy = exc.errno == errno.EADDRINUSE
        _say(
            f"caravel {command}: port {port} on {shown} is already in use; stop what holds it "
            f"or choose another with --bind, e.g. --bind {shown}:{port % 65535 + 1}"
            if busy
            else f"caravel {command}: cannot listen on {shown}:{port}: {exc.strerror}; "
            "choose another address with --bind"
        )
        raise typer.Exit(1) from None
    _say(f"caravel {command}: serving http://{shown}:{port}{what}; Ctrl+C stops it")
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        proxy_headers=False,
        server_header=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    # uvicorn re-raises the Ctrl+C it shut down on; uvicorn.run swallows it the same way.
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[listening])
    if not server.started:
        raise typer.Exit(1)


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here rather than by uvicorn: a busy port is then one line
    of ours (exit 1: a runtime failure, not a usage error) instead of uvicorn's log."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
