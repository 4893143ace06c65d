"""Where messages go, and which job type an incoming message becomes.

Egress routes pick a :class:`~caravel.bridge.messages.Destination` per job type or per queue.
Ingress routes map a message to a job type registered in the :class:`~caravel.JobRegistry` and
the queue to enqueue it in: by a rule on the routing key or subject it came under, or by the
wire name in its ``caravel-job-type`` header when that is allowed. A name read from a message is
only ever looked up among the registered wire names; nothing is imported by it.

Patterns use the brokers' own topic wildcards on dot-separated words: ``*`` matches one word,
``#`` (RabbitMQ) or ``>`` (NATS) matches the rest, one word or more for ``>`` and zero or more
for ``#``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from caravel.bridge.messages import HEADER_JOB_TYPE, Destination, IncomingMessage
from caravel.errors import OptionsError
from caravel.registry import JobRegistration, JobRegistry
from caravel.validation import check_queue_name, check_wire_name

__all__ = ["EgressRoutes", "IngressRoute", "IngressRoutes", "IngressTarget", "topic_matches"]

_MAX_ROUTE_TEXT = 255


def topic_matches(pattern: str, key: str) -> bool:
    """Whether the routing key or subject ``key`` matches ``pattern``."""
    words = key.split(".")
    parts = pattern.split(".")
    # Small patterns and keys: a direct walk with one backtracking point per ``#``.
    return _match(parts, 0, words, 0)


def _match(parts: list[str], i: int, words: list[str], j: int) -> bool:
    while i < len(parts):
        part = parts[i]
        if part == "#":
            if i == len(parts) - 1:
                return True
            return any(_match(parts, i + 1, words, k) for k in range(j, len(words) + 1))
        if part == ">":
            return i == len(parts) - 1 and j < len(words)
        if j >= len(words) or (part != "*" and part != words[j]):
            return False
        i += 1
        j += 1
    return j == len(words)


def _check_text(value: object, field_name: str) -> str:
    if not isinstance(value, str) or not value or len(value) > _MAX_ROUTE_TEXT:
        raise OptionsError(field_name, f"must be a nonempty string of at most {_MAX_ROUTE_TEXT}")
    if not value.isprintable() or " " in value:
        raise OptionsError(field_name, "must have no spaces or control characters")
    return value


def _check_destination(value: object, field_name: str) -> Destination:
    if not isinstance(value, Destination):
        raise OptionsError(field_name, "must be a Destination")
    _check_text(value.key, f"{field_name}.key")
    if value.exchange:
        _check_text(value.exchange, f"{field_name}.exchange")
    return value


@dataclass(frozen=True, slots=True)
class EgressRoutes:
    """Destinations for outbox intents: by job type first, then by queue, then ``default``.
    An intent none of them covers stays pending with the reason ``NoRoute``."""

    by_job_type: Mapping[str, Destination] = field(default_factory=dict)
    by_queue: Mapping[str, Destination] = field(default_factory=dict)
    default: Destination | None = None

    def __post_init__(self) -> None:
        for name, destination in self.by_job_type.items():
            check_wire_name(name, "by_job_type")
            _check_destination(destination, f"by_job_type[{name}]")
        for name, destination in self.by_queue.items():
            check_queue_name(name, "by_queue")
            _check_destination(destination, f"by_queue[{name}]")
        if self.default is not None:
            _check_destination(self.default, "default")
        if not (self.by_job_type or self.by_queue or self.default):
            raise OptionsError("routes", "must name at least one destination")

    def destination_for(self, queue: str, job_type: str) -> Destination | None:
        """Where an intent of ``job_type`` staged for ``queue`` goes; ``None``: nowhere."""
        found = self.by_job_type.get(job_type)
        if found is None:
            found = self.by_queue.get(queue, self.default)
        return found


@dataclass(frozen=True, slots=True)
class IngressRoute:
    """Messages under routing keys or subjects matching ``pattern`` become jobs of the registered
    type ``job_type`` in ``queue``."""

    pattern: str
    job_type: str
    queue: str

    def __post_init__(self) -> None:
        _check_text(self.pattern, "pattern")
        check_wire_name(self.job_type, "job_type")
        check_queue_name(self.queue, "queue")


@dataclass(frozen=True, slots=True)
class IngressTarget:
    """What a message becomes: a job of ``registration``'s type in ``queue``."""

    registration: JobRegistration
    queue: str


class IngressRoutes:
    """Maps incoming messages to registered job types and queues.

    ``rules`` are tried in order, the first match wins. With ``header_queue`` set, a message no
    rule matches may name its type in the ``caravel-job-type`` header and goes to that queue;
    ``accept`` then limits which wire names a header may choose (empty: any registered one).
    Every rule's type must be registered (:class:`~caravel.errors.OptionsError` otherwise).
    """

    def __init__(
        self,
        registry: JobRegistry,
        rules: Iterable[IngressRoute] = (),
        *,
        header_queue: str | None = None,
        accept: Iterable[str] = (),
    ) -> None:
        self._rules: list[tuple[IngressRoute, JobRegistration]] = []
        for rule in rules:
            if not isinstance(rule, IngressRoute):
                raise OptionsError("rules", "must be IngressRoute values")
            entry = registry.get(rule.job_type)
            if entry is None:
                raise OptionsError("rules", f"job type {rule.job_type} is not registered")
            self._rules.append((rule, entry))
        self.header_queue = None if header_queue is None else check_queue_name(header_queue)
        self._accept = frozenset(check_wire_name(name, "accept") for name in accept)
        if not self._rules and self.header_queue is None:
            raise OptionsError("routes", "need a rule or a header_queue")
        self._registry = registry

    def target_for(self, message: IncomingMessage) -> IngressTarget | None:
        """The job type and queue of ``message``; ``None`` when nothing maps it to a registered
        type (the consumer rejects it as ``UnknownJobType``)."""
        for rule, entry in self._rules:
            if topic_matches(rule.pattern, message.source):
                return IngressTarget(entry, rule.queue)
        if self.header_queue is None:
            return None
        name = message.headers.get(HEADER_JOB_TYPE)
        if name is None or (self._accept and name not in self._accept):
            return None
        found = self._registry.get(name)  # a lookup among registered names, nothing imported
        return None if found is None else IngressTarget(found, self.header_queue)
