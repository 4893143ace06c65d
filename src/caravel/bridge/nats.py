"""The NATS JetStream adapter of the bridges (the ``nats`` extra: nats-py).

Egress publishes each message to its subject with JetStream, the message id in ``Nats-Msg-Id``,
and counts it confirmed once the stream's publish acknowledgement (PubAck) arrived. A relay that
dies between the PubAck and recording the intent as delivered sends it again on restart under
the same id; the stream's *duplicate window* drops that re-send and answers it with a PubAck
marked duplicate, which counts as delivered too. The window is the stream's own setting: a
stream this adapter declares gets ``duplicate_window`` (default 10 minutes, JetStream's own
default is 2), so a relay restarted within it publishes nothing twice; one down for longer may
publish a repeat, which a consumer keyed by the message id (Caravel's ingress) still drops.

Ingress reads a durable pull consumer with explicit acknowledgement. Its ``max_ack_pending`` is
the bound on messages delivered and not settled, so the server stops delivering past it
(backpressure). A message is acknowledged only after its job row committed; one not settled
within ``ack_wait`` (a consumer that died) is delivered again and finds its job already there.

JetStream has no dead-letter exchange, so a rejected message is first published, with its
headers and the failure category in ``caravel-failure``, to a dead-letter subject (by default
its own subject with ``.dlq`` appended), and then terminated (``term``: never delivered again).
Dead letters are kept by a stream of their own: the adapter declares ``<STREAM>_DLQ`` for them
when no stream captures the dead-letter subjects yet. :meth:`JetStreamBroker.subscribe` refuses
a dead-letter subject the consumer reads (dead letters would come back to it) or its own stream
keeps (the copy keeps the message's id, which that stream's duplicate window would drop).

The client reconnects by itself when the server restarts; a publish or a fetch that falls in the
gap fails (publish: :class:`~caravel.errors.BrokerError`, so the relay records nothing and sends
again) or comes back empty (fetch).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from caravel.bridge.brokers import redacted
from caravel.bridge.failures import HEADER_FAILURE, IngressFailure
from caravel.bridge.messages import IncomingMessage, OutgoingMessage
from caravel.bridge.ports import Delivery, Refused
from caravel.bridge.routing import topic_matches
from caravel.errors import BrokerError, OptionsError
from caravel.validation import check_duration

if TYPE_CHECKING:
    from nats.aio.msg import Msg
    from nats.js.client import JetStreamContext

__all__ = ["HEADER_MSG_ID", "JetStreamBroker", "JetStreamOptions", "open_broker"]

logger = logging.getLogger("caravel.bridge")

#: JetStream's own dedupe header: the stream drops a second message with the same id inside
#: its duplicate window.
HEADER_MSG_ID = "Nats-Msg-Id"
#: Appended to a message's subject to make its dead-letter subject, unless one is configured.
DLQ_SUFFIX = ".dlq"
#: JetStream's limit on a stream's or consumer's name is 255 characters; what a name may hold.
_NAME_FORBIDDEN = frozenset(" .*>/\\\t\r\n")


def _check_name(value: object, field: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 200:
        raise OptionsError(field, "must be a nonempty string of at most 200 characters")
    if any(c in _NAME_FORBIDDEN for c in value) or not value.isprintable():
        raise OptionsError(field, "must have no spaces, dots, '*', '>' or slashes")
    return value


def _check_subject(value: object, field: str, *, wildcards: bool) -> str:
    if not isinstance(value, str) or not value or len(value) > 255:
        raise OptionsError(field, "must be a nonempty subject of at most 255 characters")
    tokens = value.split(".")
    if any(not t or not t.isprintable() or " " in t for t in tokens):
        raise OptionsError(field, "must be dot-separated words without spaces")
    if any(t in ("*", ">") for t in tokens) and not wildcards:
        raise OptionsError(field, "must be a subject without wildcards")
    if ">" in tokens[:-1]:
        raise OptionsError(field, "may have '>' only as its last word")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class JetStreamOptions:
    """How the adapter uses JetStream.

    ``declare`` (default): create what is missing, as described here; without it every stream
    and durable consumer must exist already. ``stream`` and ``subjects``: a stream to declare at
    connection when it does not exist (an existing one is left as it is: the operator's
    settings win), capturing ``subjects``, with ``duplicate_window`` (1 second to 1 day).
    ``ack_wait`` (1 second to 1 hour): how long a delivered message may stay unsettled before
    JetStream delivers it again; it applies to the durable consumers this adapter creates.
    ``dead_letter_subject``: where rejected messages go (default: the message's subject and
    ``.dlq``). ``filter_subject``: what a durable consumer this adapter creates reads (default:
    the whole stream). ``publish_timeout``: how long a publish waits for its acknowledgements
    before the pass fails.
    """

    declare: bool = True
    stream: str | None = None
    subjects: tuple[str, ...] = ()
    duplicate_window: timedelta = timedelta(minutes=10)
    ack_wait: timedelta = timedelta(seconds=30)
    dead_letter_subject: str | None = None
    filter_subject: str | None = None
    publish_timeout: timedelta = timedelta(seconds=10)
    connect_timeout: timedelta = timedelta(seconds=5)

    def __post_init__(self) -> None:
        if self.stream is not None:
            _check_name(self.stream, "stream")
        if not isinstance(self.subjects, tuple):
            raise OptionsError("subjects", "must be a tuple of subjects")
        for subject in self.subjects:
            _check_subject(subject, "subjects", wildcards=True)
        if self.subjects and self.stream is None:
            raise OptionsError("subjects", "needs a stream to declare")
        for field, value, low, high, rule in (
            ("duplicate_window", self.duplicate_window, 1, 86_400, "from 1 second to 1 day"),
            ("ack_wait", self.ack_wait, 1, 3_600, "from 1 second to 1 hour"),
            ("publish_timeout", self.publish_timeout, 1, 600, "from 1 second to 10 minutes"),
            ("connect_timeout", self.connect_timeout, 1, 600, "from 1 second to 10 minutes"),
        ):
            bounds = (timedelta(seconds=low), timedelta(seconds=high))
            check_duration(field, value, *bounds, f"must be {rule}", error=OptionsError)
        if self.dead_letter_subject is not None:
            _check_subject(self.dead_letter_subject, "dead_letter_subject", wildcards=False)
        if self.filter_subject is not None:
            _check_subject(self.filter_subject, "filter_subject", wildcards=True)

    def dead_letters_for(self, subject: str) -> str:
        """The subject a message rejected from ``subject`` is dead-lettered to."""
        return self.dead_letter_subject or subject + DLQ_SUFFIX


async def open_broker(url: str, **options: Any) -> JetStreamBroker:
    """Connect to the NATS server at ``url`` (``nats://`` or ``tls://``) with
    :class:`JetStreamOptions` ``options``, and declare its stream when one is configured.
    Raises :class:`~caravel.errors.BrokerError` when the server cannot be reached or has no
    JetStream."""
    settings = JetStreamOptions(**options)
    shown = redacted(url)
    try:
        # The client retries its first connection as often as later ones (forever, so that a
        # server restart is waited out); an unreachable server is an error after the timeout.
        async with asyncio.timeout(settings.connect_timeout.total_seconds() * 2):
            connection = await _connect(url, settings)
    except (OSError, TimeoutError, nats.errors.Error) as exc:
        raise BrokerError("connect", f"cannot reach {shown}") from exc
    broker = JetStreamBroker(connection, settings, shown)
    try:
        if settings.declare and settings.stream is not None and settings.subjects:
            await broker.declare_stream(settings.stream, list(settings.subjects))
    except BaseException:
        await broker.close()
        raise
    return broker


async def _connect(url: str, settings: JetStreamOptions) -> Client:
    client = Client()

    # The client's default callbacks print tracebacks to stderr; these log one line each.
    async def error(exc: Exception) -> None:
        logger.warning("NATS connection error", extra={"error": type(exc).__name__})

    async def disconnected() -> None:
        if not client.is_closed:  # not our own close
            logger.warning("NATS connection lost; reconnecting")

    async def reconnected() -> None:
        logger.info("NATS connection restored")

    options: dict[str, Any] = {  # typed as the client's keywords are not (seconds are floats)
        "name": "caravel-bridge",
        "connect_timeout": settings.connect_timeout.total_seconds(),
        "allow_reconnect": True,
        "max_reconnect_attempts": -1,  # a server restart is waited out, never fatal
        "reconnect_time_wait": 0.25,
        "error_cb": error,
        "disconnected_cb": disconnected,
        "reconnected_cb": reconnected,
    }
    await client.connect(url, **options)
    return client


class JetStreamBroker:
    """A connection to one NATS server, publishing and consuming through JetStream."""

    def __init__(self, connection: Client, options: JetStreamOptions, url: str) -> None:
        self._connection = connection
        self._js: JetStreamContext = connection.jetstream()
        self.options = options
        self._url = url
        self._subscriptions: list[JetStreamSubscription] = []

    @property
    def url(self) -> str:
        return self._url

    @property
    def closed(self) -> bool:
        """Whether the connection is closed for good (not merely reconnecting)."""
        return bool(self._connection.is_closed)

    async def declare_stream(self, name: str, subjects: list[str]) -> None:
        """Create stream ``name`` capturing ``subjects`` with the configured duplicate window,
        unless a stream of that name exists (left as it is)."""
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self.call("declare", self._js.stream_info(name))
            return
        config = StreamConfig(
            name=name,
            subjects=subjects,
            duplicate_window=self.options.duplicate_window.total_seconds(),
        )
        try:
            await self.call("declare", self._js.add_stream(config))
        except BrokerError:
            # Another process (a second consumer, the publishing application) may have made
            # it meanwhile: then it is there, whatever its settings.
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await self.call("declare", self._js.stream_info(name))
                return
            raise

    async def publisher(self) -> JetStreamPublisher:
        return JetStreamPublisher(self._js, self.options, self._url)

    async def subscribe(self, source: str, *, max_in_flight: int) -> JetStreamSubscription:
        """Deliveries from the durable consumer ``source`` = ``STREAM:durable``, created (pull,
        explicit acks, ``max_ack_pending = max_in_flight``) when it does not exist."""
        stream, _, durable = source.partition(":")
        if not stream or not durable:
            raise OptionsError("source", "must be STREAM:DURABLE (a JetStream durable consumer)")
        _check_name(stream, "source")
        _check_name(durable, "source")
        consumer = await self._consumer(stream, durable, max_in_flight)
        if consumer.config.filter_subject:
            reads = [consumer.config.filter_subject]
        else:
            info = await self.call("subscribe", self._js.stream_info(stream))
            reads = list(info.config.subjects or [])
        await self._dead_letter_stream(stream, reads)
        subscription = await self.call(
            "subscribe", self._js.pull_subscribe_bind(durable, stream=stream)
        )
        bound = min(max_in_flight, consumer.config.max_ack_pending or max_in_flight)
        opened = JetStreamSubscription(self, subscription, source, bound)
        self._subscriptions.append(opened)
        return opened

    async def _consumer(self, stream: str, durable: str, max_in_flight: int) -> Any:
        try:
            return await self.call("subscribe", self._js.consumer_info(stream, durable))
        except nats.js.errors.NotFoundError as exc:
            if not self.options.declare:
                reason = "no such stream or durable consumer (create it, or declare)"
                raise BrokerError("subscribe", reason) from exc
        config = ConsumerConfig(
            durable_name=durable,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.options.ack_wait.total_seconds(),
            max_ack_pending=max_in_flight,
            filter_subject=self.options.filter_subject,
        )
        return await self.call("subscribe", self._js.add_consumer(stream, config))

    async def _dead_letter_stream(self, stream: str, reads: list[str]) -> None:
        """Check that the dead letters of a consumer reading ``reads`` do not come back to it,
        and that a stream keeps them (``<stream>_DLQ``, declared when none does)."""
        missing: list[str] = []
        for subject in reads:
            pattern = self.options.dead_letter_subject or subject + DLQ_SUFFIX
            probe = pattern.replace(">", "x").replace("*", "x")
            if any(topic_matches(read, probe) for read in reads):
                rule = "must be a subject the consumer does not read (set one outside it)"
                raise OptionsError("dead_letter_subject", rule)
            try:
                keeper = await self.call("subscribe", self._js.find_stream_name_by_subject(probe))
            except nats.js.errors.NotFoundError:
                missing.append(pattern)
                continue
            if keeper == stream:
                # A copy keeps its message id, which the stream's duplicate window would drop.
                rule = "must be kept by another stream than the one the consumer reads"
                raise OptionsError("dead_letter_subject", rule)
        if missing and not self.options.declare:
            reason = "no stream keeps the dead-letter subject (create one, or declare)"
            raise BrokerError("subscribe", reason)
        if missing:
            await self.declare_stream(f"{stream}_DLQ", sorted(set(missing)))

    async def dead_letter(self, msg: Msg, category: IngressFailure) -> None:
        """Publish ``msg`` with ``category`` to its dead-letter subject and wait for the
        PubAck (a repeat, after a crash before ``term``, is dropped by the dedupe window)."""
        headers = dict(msg.headers or {})
        headers[HEADER_FAILURE] = category
        headers.setdefault(HEADER_MSG_ID, _sequence_id(msg))
        subject = self.options.dead_letters_for(msg.subject)
        timeout = self.options.publish_timeout.total_seconds()
        await self.call("reject", self._js.publish(subject, msg.data, timeout, headers=headers))

    async def call(self, operation: str, call: Any) -> Any:
        """Await ``call``, translating the client's failures to :class:`BrokerError`."""
        try:
            return await call
        except nats.js.errors.NotFoundError:
            raise
        except nats.js.errors.APIError as exc:
            reason = f"JetStream refused it at {self._url} ({exc.err_code})"
            raise BrokerError(operation, reason) from exc
        except (OSError, TimeoutError, nats.errors.Error) as exc:
            raise BrokerError(operation, f"no answer from {self._url}") from exc

    async def close(self) -> None:
        """Hand back what the subscriptions hold unsettled, flush what is buffered
        (acknowledgements) and close the connection."""
        for subscription in self._subscriptions:
            await subscription.close()
        with contextlib.suppress(OSError, TimeoutError, nats.errors.Error):
            await self._connection.flush(timeout=2)
        with contextlib.suppress(OSError, TimeoutError, nats.errors.Error):
            await self._connection.close()


def _sequence_id(msg: Msg) -> str:
    meta = msg.metadata
    return f"{meta.stream}:{meta.sequence.stream}"


class JetStreamPublisher:
    """Publishes with JetStream, the message id as ``Nats-Msg-Id``, awaiting every PubAck."""

    def __init__(self, js: JetStreamContext, options: JetStreamOptions, url: str) -> None:
        self._js = js
        self._options = options
        self._url = url

    async def publish(self, messages: Sequence[OutgoingMessage]) -> list[Refused]:
        refused: list[Refused] = []
        pending: list[tuple[str, asyncio.Future[Any]]] = []
        try:
            async with asyncio.timeout(self._options.publish_timeout.total_seconds()):
                for message in messages:
                    if message.destination.exchange:
                        refused.append(Refused(message.message_id, "Unroutable"))
                        continue
                    headers = {**message.headers, HEADER_MSG_ID: message.message_id}
                    future = await self._js.publish_async(
                        message.destination.key, message.body, headers=headers
                    )
                    pending.append((message.message_id, future))
                for message_id, future in pending:
                    refusal = await self._settle(message_id, future)
                    if refusal is not None:
                        refused.append(refusal)
        except (OSError, TimeoutError, nats.errors.Error) as exc:
            reason = f"no acknowledgement from {self._url}"
            raise BrokerError("publish", reason) from exc
        finally:
            for _, future in pending:
                future.cancel()  # what is left unanswered (a failure): nothing waits for it
        return refused

    @staticmethod
    async def _settle(message_id: str, future: asyncio.Future[Any]) -> Refused | None:
        try:
            await future  # a PubAck, duplicate or not: the stream has the message
        except nats.js.errors.NoStreamResponseError:
            return Refused(message_id, "Unroutable")  # no stream captures the subject
        except nats.js.errors.APIError:
            return Refused(message_id, "BrokerRefused")  # a full stream, a sealed one, ...
        return None


class JetStreamDelivery:
    """One JetStream message, settled once: ack, or a dead letter and ``term``."""

    def __init__(self, owner: JetStreamSubscription, msg: Msg) -> None:
        self._owner = owner
        self._msg = msg
        headers = dict(msg.headers or {})
        self.message = IncomingMessage(
            message_id=headers.get(HEADER_MSG_ID),
            body=msg.data,
            headers=headers,
            source=msg.subject,
            redelivered=msg.metadata.num_delivered > 1,
        )

    async def ack(self) -> None:
        await self._owner.settle(self, self._msg.ack())

    async def reject(self, category: IngressFailure) -> None:
        await self._owner.broker.dead_letter(self._msg, category)
        await self._owner.settle(self, self._msg.term())

    async def release(self) -> None:
        """Hand the message back for redelivery now (shutdown), not after ``ack_wait``."""
        await self._owner.settle(self, self._msg.nak())


class JetStreamSubscription:
    """Deliveries from one durable pull consumer."""

    def __init__(
        self, broker: JetStreamBroker, subscription: Any, source: str, max_in_flight: int
    ) -> None:
        self.broker = broker
        self._subscription = subscription
        self._source = source
        self._max_in_flight = max_in_flight
        self._unsettled: set[JetStreamDelivery] = set()

    @property
    def source(self) -> str:
        return self._source

    @property
    def max_in_flight(self) -> int:
        return self._max_in_flight

    async def fetch(self, limit: int, wait: float) -> list[Delivery]:
        # The consumer settles a pass's deliveries before it fetches again; what is left is
        # what a failed pass abandoned: handed back now rather than after ack_wait.
        await self._release_unsettled()
        room = min(limit, self._max_in_flight)
        try:
            msgs = await self._subscription.fetch(room, timeout=wait)
        except (TimeoutError, nats.errors.TimeoutError):
            return []  # nothing came; also what a fetch across a server restart ends in
        except (OSError, nats.errors.Error) as exc:
            if self.broker.closed:
                raise BrokerError("consume", f"connection to {self.broker.url} closed") from exc
            return []  # reconnecting: the next fetch goes to the restarted server
        deliveries = [JetStreamDelivery(self, msg) for msg in msgs]
        self._unsettled.update(deliveries)
        return list(deliveries)

    async def settle(self, delivery: JetStreamDelivery, call: Any) -> None:
        try:
            await self.broker.call("ack", call)
        finally:
            # Settled, or failed with the connection: the server redelivers it after
            # ack_wait either way, so it no longer counts against this subscription.
            self._unsettled.discard(delivery)

    async def _release_unsettled(self) -> None:
        for delivery in list(self._unsettled):
            with contextlib.suppress(BrokerError):
                await delivery.release()

    async def close(self) -> None:
        await self._release_unsettled()
        with contextlib.suppress(OSError, TimeoutError, nats.errors.Error):
            await self._subscription.unsubscribe()
