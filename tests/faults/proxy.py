"""A TCP proxy in front of PostgreSQL or MariaDB that a test controls, for severing connections on
purpose.

The proxy runs its own asyncio loop in a background thread, so a synchronous test (one that drives
real worker processes) can call it directly. Workers reach PostgreSQL through it by using
:meth:`FaultProxy.url` as their queue URL; :meth:`FaultProxy.to` puts the proxy in front of the
server a database URL names (the shared test server, or the fault suite's private cluster).

It follows the PostgreSQL wire protocol just far enough to know which statement a connection is
running (``Parse``/``Bind``/``Query`` messages, including named prepared statements), so a test can
arm a :class:`Trigger` that fires at an exact point of the queue's conversation:

* ``Timing.REQUEST``: the matching statement never reaches the server;
* ``Timing.RESPONSE``: the server ran it but the reply is lost (inside an explicit transaction,
  the transaction then dies with the connection and rolls back; a statement run in autocommit
  mode has committed);
* ``Timing.COMMIT``: the transaction holding it ended (the reply to ``COMMIT``, or to the
  autocommit statement itself) and that reply is lost, so the client cannot tell whether its
  write happened (an outcome-unknown acknowledgement).

Where a statement runs inside a transaction is read from the server's ``ReadyForQuery``
status, so both explicit transactions and autocommit statements are handled.

In front of MariaDB (:meth:`FaultProxy.to` a ``mariadb://`` URL) it follows MariaDB's client
protocol as far: each ``COM_QUERY`` names its statement, the end of the server's reply to a
command (its ``OK``, ``ERR`` or the ``EOF``/``OK`` that ends a result set) stands for
``ReadyForQuery``, and the status flags of that reply say whether a transaction is open (or,
with autocommit off, as the store's connections have it, will be by the next statement).

and then either resets the connection (RST on both sides) or silently stops forwarding it (the
sockets stay open and nothing more passes). :meth:`FaultProxy.reset_all` and
:meth:`FaultProxy.blackhole` do the same to every connection at once, on demand.

A proxy that stops forwarding is a *peer that stopped answering*: the kernels at both ends still
acknowledge every segment, so TCP keepalives and ``tcp_user_timeout`` see a healthy link. Packet
loss on the path itself is what :mod:`tests.faults.netns` produces.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy.engine import make_url

__all__ = [
    "Action",
    "FaultProxy",
    "Timing",
    "Trigger",
    "statement_kind",
]

T = TypeVar("T")

_MYSQL = "mysql"
_POSTGRESQL = "postgresql"
#: MariaDB's client capability flags and server status flags the proxy reads.
_CLIENT_COMPRESS = 0x20
_CLIENT_SSL = 0x800
_CLIENT_DEPRECATE_EOF = 0x01000000
_STATUS_IN_TRANS = 0x0001
_STATUS_AUTOCOMMIT = 0x0002
_STATUS_MORE_RESULTS = 0x0008
_COM_QUERY = 0x03
#: Commands whose replies are an OK or ERR packet, or a text result set.
_COM_PLAIN_REPLY = frozenset({0x02, _COM_QUERY, 0x0E, 0x1F})  # INIT_DB, QUERY, PING, RESET

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104
_CANCEL_REQUEST = 80877102


def statement_kind(sql: str) -> str | None:
    """Which queue operation a statement is, from its text (``None`` for anything else)."""
    text = " ".join(sql.split()).lower()
    if "caravel_jobs" not in text and text.split(" ", 1)[0] not in ("commit", "begin"):
        return None
    if text.startswith("with done as (update caravel_jobs"):
        # An outcome that writes its attempt record wraps its UPDATE in a data-modifying WITH.
        text = text.removeprefix("with done as (")
    if text.startswith("commit"):
        return "commit"
    if text.startswith("begin"):
        return "begin"
    if "skip locked" in text:
        # A worker takes over expired leases with a claim of its own, one job at a time.
        return "recover" if "state = 'running'" in text else "claim"
    if text.startswith("listen"):
        return "listen"
    if text.startswith("update caravel_jobs") and "caravel_jobs.lease_expires_at >" in text:
        return "renew"
    if (
        text.startswith("select caravel_jobs.id from caravel_jobs")
        and "caravel_jobs.lease_expires_at >" in text
        and text.endswith("for update")
    ):
        # MariaDB: a renewal (an UPDATE ... RETURNING there) locks its row first.
        return "renew"
    if text.startswith("update caravel_jobs set state=") and "last_failure" in text:
        return "fail"
    if text.startswith("update caravel_jobs set state="):
        return "complete"
    if text.startswith("insert into caravel_jobs"):
        return "enqueue"
    return "other"


class Timing(enum.Enum):
    REQUEST = "request"
    RESPONSE = "response"
    COMMIT = "commit"


class Action(enum.Enum):
    RESET = "reset"
    BLACKHOLE = "blackhole"


@dataclass(eq=False)
class Trigger:
    """Fire ``action`` on the first ``times`` statements of ``kind`` (see :func:`statement_kind`)
    at ``timing``. ``everywhere`` applies the action to every connection, not only the one that
    ran the statement."""

    kind: str
    timing: Timing
    action: Action = Action.RESET
    times: int = 1
    everywhere: bool = False
    fired: threading.Event = field(default_factory=threading.Event)
    fired_at: list[float] = field(default_factory=list)
    matched: int = 0
    #: Whether the matched statement ran inside an explicit transaction block (else autocommit).
    in_transaction: bool | None = None

    def wait(self, timeout: float) -> bool:
        return self.fired.wait(timeout)


class _Frontend:
    """Splits client bytes into messages and names the statement each one runs."""

    def __init__(self) -> None:
        self.buffer = b""
        self.startup = True
        self.opaque = False
        self.expect_ssl_answer = False
        self.statements: dict[str, str] = {}

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        """Return ``(message_type, sql)`` for each complete message that carries or runs SQL."""
        if self.opaque:
            return []
        self.buffer += data
        found: list[tuple[str, str]] = []
        while True:
            if self.startup:
                if len(self.buffer) < 8:
                    return found
                (length,) = struct.unpack("!i", self.buffer[:4])
                if len(self.buffer) < length:
                    return found
                (code,) = struct.unpack("!i", self.buffer[4:8])
                self.buffer = self.buffer[length:]
                if code in (_SSL_REQUEST, _GSS_REQUEST):
                    self.expect_ssl_answer = True
                elif code != _CANCEL_REQUEST:
                    self.startup = False
                continue
            if len(self.buffer) < 5:
                return found
            kind = chr(self.buffer[0])
            (length,) = struct.unpack("!i", self.buffer[1:5])
            if len(self.buffer) < 1 + length:
                return found
            body = self.buffer[5 : 1 + length]
            self.buffer = self.buffer[1 + length :]
            if kind == "Q":
                found.append(("Q", body.split(b"\0", 1)[0].decode("utf-8", "replace")))
            elif kind == "P":
                name, rest = body.split(b"\0", 1)
                sql = rest.split(b"\0", 1)[0].decode("utf-8", "replace")
                self.statements[name.decode()] = sql
                if name == b"":
                    found.append(("P", sql))
            elif kind == "B":
                _portal, rest = body.split(b"\0", 1)
                statement = rest.split(b"\0", 1)[0].decode()
                if statement:  # a named (prepared) statement runs again without its text
                    found.append(("B", self.statements.get(statement, "")))


class _Backend:
    """Splits server bytes into messages and reports each message type."""

    def __init__(self, frontend: _Frontend) -> None:
        self.frontend = frontend
        self.buffer = b""

    def feed(self, data: bytes) -> list[str]:
        """Message types, with ``ReadyForQuery`` reported as ``Z`` plus its transaction status:
        ``ZI`` (idle: the transaction, if any, has ended), ``ZT`` (in a transaction block) or
        ``ZE`` (in a failed one)."""
        if self.frontend.opaque:
            return []
        self.buffer += data
        kinds: list[str] = []
        while True:
            if self.frontend.expect_ssl_answer:
                if not self.buffer:
                    return kinds
                answer, self.buffer = self.buffer[:1], self.buffer[1:]
                self.frontend.expect_ssl_answer = False
                if answer in (b"S", b"G"):
                    self.frontend.opaque = True  # encrypted from here on
                    return kinds
                continue
            if len(self.buffer) < 5:
                return kinds
            (length,) = struct.unpack("!i", self.buffer[1:5])
            if len(self.buffer) < 1 + length:
                return kinds
            kind = chr(self.buffer[0])
            if kind == "Z" and length >= 5:
                kind += chr(self.buffer[5])
            kinds.append(kind)
            self.buffer = self.buffer[1 + length :]


def _lenenc(data: bytes, at: int) -> tuple[int, int]:
    """A MariaDB length-encoded integer at ``data[at:]``: its value and the offset after it."""
    first = data[at]
    if first < 0xFB:
        return first, at + 1
    size = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first, 0)
    return int.from_bytes(data[at + 1 : at + 1 + size], "little"), at + 1 + size


class _MysqlFrontend:
    """Splits client bytes into MariaDB packets and names the statement each command runs.

    A command is a client packet with sequence number 0 (the handshake's packets never are);
    the handshake response tells the capabilities the replies are framed by."""

    def __init__(self) -> None:
        self.buffer = b""
        self.opaque = False
        self.handshaken = False
        self.deprecate_eof = False
        #: The command whose reply the server owes (``None``: none, or one not followed).
        self.command: int | None = None

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        if self.opaque:
            return []
        self.buffer += data
        found: list[tuple[str, str]] = []
        while len(self.buffer) >= 4:
            length = int.from_bytes(self.buffer[:3], "little")
            if len(self.buffer) < 4 + length:
                break
            sequence = self.buffer[3]
            body = self.buffer[4 : 4 + length]
            self.buffer = self.buffer[4 + length :]
            if not self.handshaken:
                if sequence == 1 and len(body) >= 4:  # the handshake response (or SSL request)
                    flags = int.from_bytes(body[:4], "little")
                    self.deprecate_eof = bool(flags & _CLIENT_DEPRECATE_EOF)
                    if flags & (_CLIENT_SSL | _CLIENT_COMPRESS):
                        self.opaque = True  # encrypted or compressed from here on
                        return found
                    self.handshaken = True
                continue
            if sequence != 0 or not body:
                continue  # the rest of the authentication, or of a long packet
            self.command = body[0] if body[0] in _COM_PLAIN_REPLY else None
            if body[0] == _COM_QUERY:
                found.append(("Q", body[1:].decode("utf-8", "replace")))
        return found


class _MysqlBackend:
    """Follows the server's replies to the commands :class:`_MysqlFrontend` saw and reports the
    end of each as ``ZI`` or ``ZT`` (PostgreSQL's ``ReadyForQuery`` with the transaction status
    it stands for: ``T`` while a transaction is open)."""

    def __init__(self, frontend: _MysqlFrontend) -> None:
        self.frontend = frontend
        self.buffer = b""
        self.state = "first"
        self.columns = 0
        self.in_transaction = False
        self.autocommit = True

    def _ended(self, status: int | None, kinds: list[str]) -> None:
        if status is not None:
            self.in_transaction = bool(status & _STATUS_IN_TRANS)
            self.autocommit = bool(status & _STATUS_AUTOCOMMIT)
            if status & _STATUS_MORE_RESULTS:
                self.state = "first"
                return
        self.frontend.command = None
        self.state = "first"
        kinds.append("ZT" if self.in_transaction else "ZI")

    def feed(self, data: bytes) -> list[str]:
        if self.frontend.opaque:
            return []
        self.buffer += data
        kinds: list[str] = []
        while len(self.buffer) >= 4:
            length = int.from_bytes(self.buffer[:3], "little")
            if len(self.buffer) < 4 + length:
                break
            body = self.buffer[4 : 4 + length]
            self.buffer = self.buffer[4 + length :]
            if self.frontend.command is None or not body:
                continue  # the handshake, or a reply the proxy does not follow
            head = body[0]
            if head == 0xFF:  # ERR: the reply is over; a transaction stays as it was
                self._ended(None, kinds)
            elif self.state == "first":
                if head == 0x00:  # OK
                    _, at = _lenenc(body, 1)
                    _, at = _lenenc(body, at)
                    self._ended(int.from_bytes(body[at : at + 2], "little"), kinds)
                else:  # a result set: its column count, its columns, its rows
                    self.columns, _ = _lenenc(body, 0)
                    self.state = "columns"
            elif self.state == "columns":
                self.columns -= 1
                if self.columns == 0:
                    self.state = "rows" if self.frontend.deprecate_eof else "columns-eof"
            elif self.state == "columns-eof":
                self.state = "rows"
            elif head == 0xFE and length < 0xFFFFFF:  # the result set's end: EOF or OK
                if self.frontend.deprecate_eof:
                    _, at = _lenenc(body, 1)
                    _, at = _lenenc(body, at)
                    self._ended(int.from_bytes(body[at : at + 2], "little"), kinds)
                else:
                    self._ended(int.from_bytes(body[3:5], "little"), kinds)
        return kinds


@dataclass(eq=False)
class _Link:
    """One client connection and its upstream connection."""

    number: int
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter | None = None
    frontend: _Frontend | _MysqlFrontend = field(default_factory=_Frontend)
    backend: _Backend | _MysqlBackend | None = None
    frozen: bool = False
    closed: bool = False
    # A trigger waiting for the server's next ReadyForQuery (the statement's reply), or for the
    # next one that reports the transaction over (the reply to COMMIT, or to an autocommit
    # statement itself).
    await_ready: Trigger | None = None
    await_end: Trigger | None = None
    status: str = "I"  # the transaction status of the server's last ReadyForQuery

    def in_transaction(self) -> bool:
        """Whether the next statement runs inside a transaction that does not end with it."""
        if isinstance(self.backend, _MysqlBackend) and not self.backend.autocommit:
            return True
        return self.status == "T"

    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class FaultProxy:
    """Forwards ``listen_host:port`` to ``target_host:target_port`` until told otherwise;
    ``protocol`` (``postgresql`` or ``mysql``) is the one the server speaks."""

    def __init__(
        self,
        target_host: str = "127.0.0.1",
        target_port: int = 5432,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        protocol: str = _POSTGRESQL,
    ) -> None:
        if protocol not in (_POSTGRESQL, _MYSQL):
            raise ValueError(f"the proxy speaks postgresql or mysql, not {protocol!r}")
        self.protocol = protocol
        self.target_host = target_host
        self.target_port = target_port
        self.listen_host = listen_host
        self.port = listen_port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._numbers = iter(range(1, 1 << 30))
        self._dark = False
        self._closing = False
        self._triggers: list[Trigger] = []
        self.accepted = 0
        self.resets = 0
        self.seen: Counter[str] = Counter()
        self.statements: list[tuple[float, int, str]] = []  # (time, link, kind) of queue SQL
        self.events: list[tuple[float, int, str]] = []  # (time, link, what) for diagnostics

    @classmethod
    def to(cls, database_url: str, *, listen_host: str = "127.0.0.1") -> FaultProxy:
        """A proxy in front of the server ``database_url`` names (its host and port, and its
        protocol: MariaDB's for a ``mariadb://`` or ``mysql://`` URL), rather than the default
        ``127.0.0.1:5432``."""
        url = make_url(database_url)
        if url.get_backend_name() in ("mariadb", "mysql"):
            host, port = url.host or "127.0.0.1", url.port or 3306
            return cls(host, port, listen_host=listen_host, protocol=_MYSQL)
        return cls(url.host or "127.0.0.1", url.port or 5432, listen_host=listen_host)

    # ----- lifecycle -----------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._start())
        return self

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._call(self._shutdown(), timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if self._thread.is_alive():
            return
        # Anything still pending (a connection accepted while closing) is finished here, on
        # this thread, before the loop is closed, as asyncio.run() does.
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        if pending:
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        for link in list(self._links):
            self._abort(link)
        self._loop.run_until_complete(asyncio.sleep(0))  # let aborted transports finish
        self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def url(self, database_url: str, **query: str) -> str:
        """``database_url`` pointed at this proxy (plaintext, so the proxy can read it: MariaDB's
        drivers use no TLS unless asked to)."""
        url = make_url(database_url).set(host=self.listen_host, port=self.port)
        plaintext = {} if self.protocol == _MYSQL else {"sslmode": "disable"}
        url = url.update_query_dict({**plaintext, **query})
        return url.render_as_string(hide_password=False)

    # ----- control (thread-safe) -------------------------------------------------------------

    @property
    def connections(self) -> int:
        """Open client connections right now."""
        return self._call(self._count())

    def arm(self, trigger: Trigger) -> Trigger:
        """Fire ``trigger`` when a connection reaches it; see the module docstring."""
        self._call(self._arm(trigger))
        return trigger

    def disarm(self) -> None:
        self._call(self._disarm())

    def reset_all(self) -> int:
        """Reset every open connection (RST to both ends). Returns how many there were."""
        return self._call(self._reset_all())

    def blackhole(self) -> None:
        """Stop forwarding on every connection, present and future, without closing any."""
        self._call(self._set_dark(True))

    def heal(self) -> None:
        """Forward again. Connections frozen meanwhile are reset (their conversation is lost);
        new ones work normally."""
        self._call(self._set_dark(False))

    def wait_for(self, kind: str, count: int = 1, timeout: float = 30.0) -> None:
        """Wait until statements of ``kind`` were seen ``count`` times in all."""
        deadline = time.monotonic() + timeout
        while self.seen[kind] < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the proxy saw {self.seen[kind]} {kind} statement(s) in {timeout}s, "
                    f"expected {count}; seen so far: {dict(self.seen)}"
                )
            time.sleep(0.01)  # polling what the proxy's thread has seen

    # ----- inside the loop -------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self.listen_host, self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            self._abort(link)
        while self._tasks:  # every pump, including those of links closed earlier
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._tasks.difference_update(tasks)
        for _ in range(3):  # aborted transports close their sockets on the next iterations
            await asyncio.sleep(0)

    async def _count(self) -> int:
        return sum(1 for link in self._links if not link.closed)

    async def _arm(self, trigger: Trigger) -> None:
        self._triggers.append(trigger)

    async def _disarm(self) -> None:
        self._triggers.clear()
        for link in self._links:
            link.await_ready = link.await_end = None

    async def _reset_all(self) -> int:
        links = [link for link in self._links if not link.closed]
        for link in links:
            self._abort(link)
        return len(links)

    async def _set_dark(self, dark: bool) -> None:
        self._dark = dark
        if dark:
            for link in self._links:
                link.frozen = True
        else:
            for link in [link for link in self._links if link.frozen]:
                self._abort(link)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        link = _Link(next(self._numbers), writer)
        self.events.append((time.monotonic(), link.number, "accepted"))
        if self.protocol == _MYSQL:
            frontend = _MysqlFrontend()
            link.frontend, link.backend = frontend, _MysqlBackend(frontend)
        else:
            link.backend = _Backend(link.frontend)  # type: ignore[arg-type]
        link.frozen = self._dark
        self._links.add(link)
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            self._abort(link)
            return
        link.server = up_writer
        if link.closed or self._closing:
            self._abort(link)
            return
        link.tasks = [
            asyncio.create_task(self._pump(link, reader, up_writer, upstream=True)),
            asyncio.create_task(self._pump(link, up_reader, writer, upstream=False)),
        ]
        for task in link.tasks:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(
        self,
        link: _Link,
        source: asyncio.StreamReader,
        target: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> None:
        try:
            while True:
                if link.frozen:
                    await asyncio.sleep(3600)  # hold everything; heal() or close() resets us
                    continue
                data = await source.read(65536)
                if not data:
                    side = "client" if upstream else "server"
                    self.events.append((time.monotonic(), link.number, f"closed by {side}"))
                    self._close_link(link)
                    return
                if link.frozen:
                    continue  # swallowed: the link went dark while this was on its way
                forward = (
                    self._inspect_up(link, data) if upstream else self._inspect_down(link, data)
                )
                if not forward:
                    continue
                target.write(data)
                await target.drain()
        except (OSError, asyncio.IncompleteReadError) as exc:
            side = "client" if upstream else "server"
            self.events.append((time.monotonic(), link.number, f"{side}: {type(exc).__name__}"))
        finally:
            if not link.frozen:
                self._abort(link)

    def _inspect_up(self, link: _Link, data: bytes) -> bool:
        """Look at client bytes; return whether to forward them."""
        forward = True
        for _message, sql in link.frontend.feed(data):
            kind = statement_kind(sql)
            if kind is None:
                continue
            self.seen[kind] += 1
            self.statements.append((time.monotonic(), link.number, kind))
            trigger = self._match(kind)
            if trigger is None:
                continue
            trigger.in_transaction = link.in_transaction()
            if trigger.timing is Timing.REQUEST:
                self._fire(link, trigger)
                forward = False
            elif trigger.timing is Timing.RESPONSE:
                link.await_ready = trigger
            else:
                link.await_end = trigger
        return forward and not link.frozen and not link.closed

    def _inspect_down(self, link: _Link, data: bytes) -> bool:
        """Look at server bytes; return whether to forward them."""
        assert link.backend is not None
        kinds = link.backend.feed(data)
        ready = [k for k in kinds if k.startswith("Z")]
        if ready:
            link.status = ready[-1][1:] or "I"
        if link.await_ready is not None and any(k.startswith("Z") for k in kinds):
            trigger, link.await_ready = link.await_ready, None
            self._fire(link, trigger)
            return False
        if link.await_end is not None and "ZI" in kinds:
            trigger, link.await_end = link.await_end, None
            self._fire(link, trigger)
            return False
        return not link.frozen and not link.closed

    def _match(self, kind: str) -> Trigger | None:
        for trigger in self._triggers:
            if trigger.kind == kind and trigger.matched < trigger.times:
                trigger.matched += 1
                return trigger
        return None

    def _fire(self, link: _Link, trigger: Trigger) -> None:
        victims = [lk for lk in self._links if not lk.closed] if trigger.everywhere else [link]
        for victim in victims:
            if trigger.action is Action.RESET:
                self._abort(victim)
            else:
                victim.frozen = True
        if trigger.action is Action.BLACKHOLE and trigger.everywhere:
            self._dark = True
        trigger.fired_at.append(time.monotonic())
        trigger.fired.set()

    def _close_link(self, link: _Link) -> None:
        """One end closed its side: close the other end too, normally (FIN, not RST)."""
        if link.closed:
            return
        link.closed = True
        for writer in (link.client, link.server):
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()
        for task in link.tasks:
            if task is not asyncio.current_task(self._loop):
                task.cancel()
        self._links.discard(link)

    def _abort(self, link: _Link) -> None:
        """Close both sockets with RST (no FIN, no flush), like a middlebox resetting them."""
        if link.closed:
            return
        link.closed = True
        link.frozen = False
        self.resets += 1
        self.events.append((time.monotonic(), link.number, "reset"))
        for writer in (link.client, link.server):
            if writer is None:
                continue
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        for task in link.tasks:
            if task is not asyncio.current_task(self._loop):
                task.cancel()
        self._links.discard(link)
