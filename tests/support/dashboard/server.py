"""A real uvicorn server on a free loopback port, in a background thread, for the browser tests
and the screenshot script. Waiting here is for a real server, so it polls real time with a
deadline."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from html import escape
from typing import TYPE_CHECKING

import uvicorn
from starlette.types import ASGIApp

from tests.support.processes import wait_until

if TYPE_CHECKING:
    from playwright.sync_api import Page, Response


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


def post_from_another_site(page: Page, target: str, fields: Mapping[str, str]) -> Response:
    """What a forged form does: a page on another origin (a server of its own on another
    port) that posts ``fields`` to ``target`` as soon as it loads, in ``page``'s browser, so
    the dashboard's cookies go along but no token the attacker cannot read. The answer of
    the POST."""
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    inputs = "".join(
        f'<input name="{escape(name)}" value="{escape(value)}">' for name, value in fields.items()
    )
    attack = (
        f'<!doctype html><form id="f" method="post" action="{escape(target)}">{inputs}</form>'
        "<script>document.getElementById('f').submit()</script>"
    )

    async def evil(request: object) -> HTMLResponse:
        return HTMLResponse(attack)

    attacker = Starlette(routes=[Route("/", evil)])
    with serving(attacker) as evil_base:
        with page.expect_navigation(url=re.compile(re.escape(target))) as navigation:
            page.goto(evil_base + "/")
        response = navigation.value
    assert response is not None
    return response
