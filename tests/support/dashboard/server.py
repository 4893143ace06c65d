"""A real uvicorn server on a free loopback port, in a background thread, for the browser tests
and the screenshot script. Waiting here is for a real server, so it polls real time with a
deadline."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp

from tests.support.processes import wait_until


@contextmanager
def serving(app: ASGIApp, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``app`` until the block ends; yields the base URL (``http://127.0.0.1:PORT``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True
    )
    thread.start()
    wait_until(
        lambda: server.started or not thread.is_alive(),
        what="the test server to start",
        interval=0.01,
    )
    if not server.started:
        raise RuntimeError("the test server did not start")
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
