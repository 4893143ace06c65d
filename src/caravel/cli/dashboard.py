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

__all__ = ["dashboard", "parse_bind"]


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
    try:
        host, port = parse_bind(bind)
    except ValueError as exc:
        _say(f"caravel dashboard: --bind {exc}")
        raise typer.Exit(2) from None
    if not _loopback(host) and not allow_remote:
        _say(
            f"caravel dashboard: refusing to listen on {host}, which other machines can reach; "
            "use a loopback address, or add --allow-remote (and --authorize)"
        )
        raise typer.Exit(2)
    if lost_after <= 0:
        _say("caravel dashboard: --lost-after must be positive")
        raise typer.Exit(2)
    try:
        import uvicorn

        from caravel.web import dashboard as build
    except ImportError:
        _say(
            "caravel dashboard: the web extra is not installed; "
            "run: pip install 'caravel-queue[web]'"
        )
        raise typer.Exit(2) from None
    try:
        check = _load_authorize(authorize) if authorize is not None else None
    except ValueError as exc:  # ValidationError included
        _say(f"caravel dashboard: {exc}")
        raise typer.Exit(2) from None

    async def schema_ready() -> None:
        async with open_inspector(url) as reader:
            await reader.check_schema()

    try:
        asyncio.run(schema_ready())
        app = build(
            url,
            authorize=check,
            refresh_seconds=refresh,
            lost_after=timedelta(seconds=lost_after),
        )
    except CaravelError as exc:  # 2 for a missing file or an unmigrated queue, 1 otherwise
        _say(f"caravel dashboard: {explain(exc, url) or exc}")
        raise typer.Exit(exit_code(exc)) from None
    shown = f"[{host}]" if ":" in host else host
    try:
        listening = _listen(host, port)
    except OSError as exc:
        busy = exc.errno == errno.EADDRINUSE
        _say(
            f"caravel dashboard: port {port} on {shown} is already in use; stop what holds it "
            f"or choose another with --bind, e.g. --bind {shown}:{port % 65535 + 1}"
            if busy
            else f"caravel dashboard: cannot listen on {shown}:{port}: {exc.strerror}; "
            "choose another address with --bind"
        )
        raise typer.Exit(1) from None
    who = "requests decided by " + authorize if authorize else "requests from this machine only"
    if check is None and not _loopback(host):
        _say("caravel dashboard: no --authorize: requests from other machines will be refused")
    _say(f"caravel dashboard: serving http://{shown}:{port}/ ({who}); Ctrl+C stops it")
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
