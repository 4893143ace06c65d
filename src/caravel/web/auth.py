"""Who may do what on the dashboard.

The host application decides: it passes ``authorize``, a function (sync or async) that takes the
Starlette :class:`~starlette.requests.Request` and returns a :class:`Principal`, or ``None`` for
an anonymous request. The dashboard then checks the principal's permission for every page and
every action. Without ``authorize`` the dashboard answers only requests made on this machine
(:func:`local_request`), and treats them as a full operator.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import HTTPConnection, Request
from starlette.types import Scope

__all__ = [
    "Authorize",
    "Principal",
    "local_request",
    "principal_of",
    "refusal_reason",
    "remember_principal",
]


@dataclass(frozen=True, slots=True)
class Principal:
    """A person (or service) using the dashboard, and what they may do.

    Attributes:
        name: shown in the page header, and part of the anti-forgery token, so a token issued
            to one principal is refused for another. Never used to look anything up.
        can_read: see the pages: queue counts, jobs, dead letters, workers.
        can_operate: replay dead letters (one, or a filtered selection), pause and resume queues.
        can_see_payloads: see job payloads on the job page. Payloads may hold personal data.
    """

    name: str
    can_read: bool = True
    can_operate: bool = False
    can_see_payloads: bool = False

    @classmethod
    def reader(cls, name: str) -> Principal:
        """Reads every page, sees no payloads and changes nothing."""
        return cls(name, can_read=True)

    @classmethod
    def operator(cls, name: str, *, payloads: bool = True) -> Principal:
        """Reads everything, replays dead letters, and (unless ``payloads=False``) sees
        payloads."""
        return cls(name, can_read=True, can_operate=True, can_see_payloads=payloads)


#: ``authorize(request)``: the principal making the request, or ``None`` when anonymous.
Authorize = Callable[[Request], Principal | Awaitable[Principal | None] | None]

#: The principal of an allowed local request when no ``authorize`` was given.
LOCAL_OPERATOR = Principal("local operator", can_read=True, can_operate=True, can_see_payloads=True)

#: Where the guard leaves the principal of a request, for the pages and the renderer.
_SCOPE_KEY = "caravel.web.principal"

#: Headers a proxy, load balancer or CDN adds to say who the client was. Names are compared
#: lower-cased with ``_`` read as ``-`` (some proxies and servers spell them either way).
_PROXY_HEADERS = frozenset(
    {
        "forwarded",
        "forwarded-for",
        "via",
        "x-real-ip",
        "x-originating-ip",
        "x-remote-ip",
        "x-remote-addr",
        "x-azure-socketip",
        "x-envoy-external-address",
        "x-appengine-user-ip",
        "cloudfront-viewer-address",
    }
)
#: Families of such headers, by how their names begin or end: ``X-Forwarded`` and every
#: ``X-Forwarded-*``; ``Client-IP``, ``X-Client-IP``, ``True-Client-IP``,
#: ``X-Cluster-Client-IP``, ``Fastly-Client-IP``, ``Fly-Client-IP``, ``X-Azure-ClientIP`` and
#: the like; ``CF-Connecting-IP`` (and ``-IPv6``), ``DO-Connecting-IP``;
#: ``X-Original-Forwarded-For``, ``X-Vercel-Forwarded-For``.
_PROXY_PREFIXES = ("x-forwarded",)
_PROXY_SUFFIXES = ("client-ip", "clientip", "connecting-ip", "connecting-ipv6", "-forwarded-for")
_LOCAL_NAMES = {"localhost", "localhost.", "ip6-localhost"}
#: A Host header is a bracketed IPv6 literal or a host name (or IPv4 address), each with an
#: optional port, and nothing else: ``[::1].evil.com`` is neither. A port is a decimal number
#: without leading zeros (its range is checked after the match).
_HOST = re.compile(
    r"(?:\[(?P<literal>[0-9a-f:.]+)\]|(?P<name>[a-z0-9.-]+))(?::(?P<port>[1-9][0-9]{0,4}))?",
    re.ASCII,
)
_MAX_PORT = 65_535


def _is_loopback_address(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_name(host_header: str) -> str | None:
    """The name part of a Host header (``[::1]:8765`` -> ``::1``, ``localhost:80`` ->
    ``localhost``), or ``None`` when it is not exactly one of the two forms."""
    found = _HOST.fullmatch(host_header.strip().lower())
    if found is None or int(found.group("port") or 1) > _MAX_PORT:
        return None
    literal = found.group("literal")
    if literal is not None:
        # Only a real IPv6 address belongs in brackets ([127.0.0.1] is not a Host).
        return literal if ":" in literal and _is_loopback_address(literal) else None
    return str(found.group("name"))


def _is_proxy_header(name: str) -> bool:
    name = name.lower().replace("_", "-")
    return (
        name in _PROXY_HEADERS or name.startswith(_PROXY_PREFIXES) or name.endswith(_PROXY_SUFFIXES)
    )


def _through_proxy(conn: HTTPConnection) -> bool:
    return any(_is_proxy_header(name) for name in conn.headers)


def refusal_reason(conn: HTTPConnection) -> str | None:
    """Why a request is not a local one, or ``None`` when it is.

    Local means all of: the TCP peer is a loopback address; the request did not come through a
    proxy (no header a proxy adds to name the client: ``Forwarded``, ``Via``, ``X-Forwarded*``,
    ``X-Real-IP``, any ``*Client-IP``, ``*Connecting-IP`` or ``*-Forwarded-For``, and the
    others in :data:`_PROXY_HEADERS`, since a proxy on this machine would make every remote
    visitor look local); and the ``Host`` header is exactly a loopback address or
    ``localhost``, with an optional port from 1 to 65535 (so a web page that rebinds its own
    DNS name to 127.0.0.1 cannot read the dashboard through the visitor's browser).
    """
    client = conn.client
    if client is None or not _is_loopback_address(client.host):
        return "the request did not come from a loopback address"
    if _through_proxy(conn):
        return "the request came through a proxy"
    hosts = conn.headers.getlist("host")
    host = _host_name(hosts[0]) if len(hosts) == 1 else None
    if host is None or (host not in _LOCAL_NAMES and not _is_loopback_address(host)):
        return "the request was not addressed to localhost or a loopback address"
    return None


def local_request(conn: HTTPConnection) -> bool:
    """Whether the request was made on this machine, to a loopback address, without a proxy."""
    return refusal_reason(conn) is None


def remember_principal(scope: Scope, principal: Principal | None) -> None:
    """Record who makes this request, once, before any route runs."""
    scope[_SCOPE_KEY] = principal


def principal_of(conn: HTTPConnection) -> Principal | None:
    """Who makes this request: ``None`` when anonymous (or for a static file)."""
    found: Principal | None = conn.scope.get(_SCOPE_KEY)
    return found
