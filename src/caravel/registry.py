"""Job types, their persisted wire names and their handlers.

A wire name (for example ``reports.generate.v1``) is the contract stored with every job. The
registry maps it both ways: a payload type to its wire name for enqueue, and a wire name to its
payload type and handler for the worker. Only registered types can be enqueued, and a stored job
is decoded only through the type registered under its wire name, so nothing read from the
database ever selects code to import.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import BaseModel, PydanticSchemaGenerationError, TypeAdapter

from caravel.context import JobContext
from caravel.errors import RegistrationError, UnknownJobTypeError, ValidationError
from caravel.flow.concurrency import ConcurrencyLimit
from caravel.flow.partition import TENANT, check_partition_by
from caravel.flow.rate import RateLimit, check_weight
from caravel.limits import MAX_PRIORITY, MIN_PRIORITY
from caravel.options import RetryPolicy
from caravel.validation import check_int, check_queue_name, check_timeout, check_wire_name

if TYPE_CHECKING:
    from caravel.schedules import Schedule

__all__ = ["Handler", "JobRegistration", "JobRegistry"]

JobT = TypeVar("JobT")

AsyncHandler = Callable[[Any, JobContext[Any]], Awaitable[None]]
SyncHandler = Callable[[Any, JobContext[Any]], None]
Handler = AsyncHandler | SyncHandler
HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])
LimitT = TypeVar("LimitT", ConcurrencyLimit, RateLimit)


def _is_payload_type(candidate: object) -> bool:
    if not isinstance(candidate, type):
        return False
    return dataclasses.is_dataclass(candidate) or issubclass(candidate, BaseModel)


def _is_async_callable(handler: object) -> bool:
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(handler, "__call__", None)  # noqa: B004 - callable objects with async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def _takes_job_and_context(handler: object) -> bool:
    """Whether ``handler(job, ctx)`` binds; a callable whose signature cannot be read (some
    built-ins) gets the benefit of the doubt."""
    try:
        signature = inspect.signature(handler)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(None, None)
    except TypeError:
        return False
    return True


def _adapter(wire_name: str, payload_type: type[Any]) -> TypeAdapter[Any]:
    """The pydantic adapter of a payload type, or a :class:`RegistrationError` naming the wire
    name and the field whose type pydantic cannot serialize."""
    try:
        return TypeAdapter(payload_type)
    except PydanticSchemaGenerationError:
        field = _unserializable_field(payload_type)
        where = f"field {field!r}" if field is not None else "a field"
        raise RegistrationError(
            "payload_type",
            f"for {wire_name}: {where} has a type that cannot be serialized to JSON "
            "(use JSON-friendly types, or give the type a pydantic schema)",
        ) from None


def _unserializable_field(payload_type: type[Any]) -> str | None:
    try:
        hints = typing.get_type_hints(payload_type)
    except Exception:  # an annotation that does not resolve: the field stays unnamed
        return None
    for name, hint in hints.items():
        try:
            TypeAdapter(hint)
        except PydanticSchemaGenerationError:
            return name
    return None


@dataclass(frozen=True, slots=True, eq=False)
class JobRegistration:
    """One registration: a wire name (the job type as stored), its payload type and its
    handler."""

    wire_name: str
    payload_type: type[Any]
    handler: Handler
    is_async: bool
    adapter: TypeAdapter[Any]
    retry: RetryPolicy | None = None
    """This type's retry policy, over the queue's defaults; ``None``: the queue's."""
    priority: int | None = None
    """This type's jobs' priority where their dispatch gives none; ``None``: 0."""
    timeout: timedelta | None = None
    """How long one attempt of this type may run where its dispatch gives no ``timeout``;
    ``None``: no timeout."""
    partition_by: str = TENANT
    """What a per-key concurrency limit counts this type's jobs by where their dispatch gives
    no ``partition_key``: ``"tenant"``, or the name of a payload field."""
    weight: int = 1
    """What one start of this type's jobs counts for against a rate limit."""


class JobRegistry:
    """The job types an application may enqueue and a worker may run.

    Register each payload type once, under one wire name::

        registry = JobRegistry()

        @registry.handles("reports.generate.v1", GenerateReport)
        async def generate_report(job: GenerateReport, ctx: JobContext) -> None:
            ...

    A handler is ``async def handler(job, ctx) -> None``; a plain function is accepted too and
    runs in a worker thread. Returning normally means success (a value other than ``None`` is
    stored as the job's JSON result); raising means the attempt failed, except for
    :class:`~caravel.Snooze` and :class:`~caravel.Discard`.

    ``queues`` names the queues a worker on this registry serves when it is started without
    naming any (``caravel worker --app ...`` without ``--queue``); see :attr:`queues`. A job's
    queue is still chosen when it is enqueued (``DispatchOptions.queue``).
    Raises :class:`~caravel.errors.RegistrationError` for a name that is not a queue name, or
    a single string where a collection of names belongs.
    """

    def __init__(self, *, queues: Iterable[str] = ()) -> None:
        if isinstance(queues, str):
            raise RegistrationError("queues", "must be a collection of queue names, not one name")
        try:
            named = [check_queue_name(name, "queues") for name in queues]
        except ValidationError as exc:
            raise RegistrationError(exc.field, exc.rule) from None
        #: In the order given, each once.
        self._queues = tuple(dict.fromkeys(named))
        self._by_name: dict[str, JobRegistration] = {}
        self._by_type: dict[type[Any], JobRegistration] = {}
        self._schedules: dict[str, Schedule] = {}
        self._limits: dict[tuple[str, str], ConcurrencyLimit | RateLimit] = {}

    def register(
        self,
        wire_name: str,
        payload_type: type[JobT],
        handler: Handler,
        *,
        retry: RetryPolicy | None = None,
        priority: int | None = None,
        timeout: timedelta | None = None,
        partition_by: str = TENANT,
        weight: int = 1,
    ) -> None:
        """Register ``payload_type`` under ``wire_name`` with its handler, and optionally the
        :class:`~caravel.RetryPolicy` its jobs follow instead of the queue's defaults, the
        priority (-100 to 100) its jobs get when their ``DispatchOptions.priority`` is ``None``
        and the execution ``timeout`` (1 millisecond to 7 days) of each attempt when their
        ``DispatchOptions.timeout`` is ``None``: at the timeout the handler is asked to stop and
        the attempt fails as ``TimedOut``, retried by the same policy.

        ``partition_by`` says which key a per-key concurrency limit
        (:class:`~caravel.ConcurrencyLimit`) counts its jobs under when their
        ``DispatchOptions.partition_key`` is ``None``: ``"tenant"`` (the default), or the name
        of a payload field whose value (a string, or an integer) follows the rules of
        idempotency keys, checked at each enqueue.

        ``weight`` (1 to 10,000) is what one start of its jobs counts for against a rate limit
        (:class:`~caravel.RateLimit`): a job of weight 5 uses five of a rate of 10 per second.

        Raises :class:`~caravel.errors.RegistrationError` for an invalid or already used wire
        name, a type registered before, a type that is neither a dataclass nor a pydantic model,
        a handler that is not callable, a priority or timeout out of range, or a
        ``partition_by`` that is neither ``"tenant"`` nor a field of the payload type, or a
        weight out of range.
        """
        try:
            check_wire_name(wire_name)
        except ValidationError as exc:
            raise RegistrationError(exc.field, exc.rule) from None
        if not _is_payload_type(payload_type):
            raise RegistrationError(
                "payload_type", "must be a dataclass or a pydantic BaseModel subclass"
            )
        if not callable(handler):
            raise RegistrationError("handler", "must be callable as handler(job, ctx)")
        if not _takes_job_and_context(handler):
            raise RegistrationError(
                "handler", f"for {wire_name} must accept two arguments, handler(job, ctx)"
            )
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise RegistrationError("retry", "must be a RetryPolicy or None")
        if priority is not None:
            check_int("priority", priority, MIN_PRIORITY, MAX_PRIORITY, error=RegistrationError)
        if timeout is not None:
            check_timeout(timeout, error=RegistrationError)
        partition_by = check_partition_by(payload_type, partition_by)
        check_weight(weight, error=RegistrationError)
        if wire_name in self._by_name:
            raise RegistrationError("wire_name", "is already registered")
        if payload_type in self._by_type:
            raise RegistrationError("payload_type", "is already registered under another name")
        entry = JobRegistration(
            wire_name=wire_name,
            payload_type=payload_type,
            handler=handler,
            is_async=_is_async_callable(handler),
            adapter=_adapter(wire_name, payload_type),
            retry=retry,
            priority=priority,
            timeout=timeout,
            partition_by=partition_by,
            weight=weight,
        )
        self._by_name[wire_name] = entry
        self._by_type[payload_type] = entry

    def handles(
        self,
        wire_name: str,
        payload_type: type[JobT],
        *,
        retry: RetryPolicy | None = None,
        priority: int | None = None,
        timeout: timedelta | None = None,
        partition_by: str = TENANT,
        weight: int = 1,
    ) -> Callable[[HandlerT], HandlerT]:
        """Decorator form of :meth:`register`; returns the handler unchanged."""

        def decorate(handler: HandlerT) -> HandlerT:
            self.register(
                wire_name,
                payload_type,
                handler,
                retry=retry,
                priority=priority,
                timeout=timeout,
                partition_by=partition_by,
                weight=weight,
            )
            return handler

        return decorate

    def schedule(self, schedule: Schedule) -> Schedule:
        """Register a periodic job (see :class:`~caravel.Schedule`); returns it. Workers on
        this registry enqueue its slots. Raises :class:`~caravel.errors.RegistrationError`
        when the name is taken or the job's type is not registered here."""
        from caravel.schedules import Schedule

        if not isinstance(schedule, Schedule):
            raise RegistrationError("schedule", "must be a caravel.Schedule")
        if schedule.name in self._schedules:
            raise RegistrationError("name", "is already used by another schedule")
        if type(schedule.job) not in self._by_type:
            raise RegistrationError("job", "must be an instance of a type registered here")
        self._schedules[schedule.name] = schedule
        return schedule

    def limit(self, limit: LimitT) -> LimitT:
        """Declare a queue's concurrency limits (see :class:`~caravel.ConcurrencyLimit`) or its
        rates (see :class:`~caravel.RateLimit`); returns it. A worker on this registry stores
        them when it starts, replacing what the database held of that kind for that queue (an
        operator's ``caravel queues limits set`` holds until then). Raises
        :class:`~caravel.errors.RegistrationError` when it is neither, or its queue has a limit
        of that kind declared here already."""
        if not isinstance(limit, ConcurrencyLimit | RateLimit):
            raise RegistrationError("limit", "must be a caravel.ConcurrencyLimit or RateLimit")
        kind = type(limit).__name__
        if (kind, limit.queue) in self._limits:
            raise RegistrationError("queue", f"has a {kind} declared here already")
        self._limits[kind, limit.queue] = limit
        return limit

    @property
    def limits(self) -> tuple[ConcurrencyLimit | RateLimit, ...]:
        """The declared concurrency limits and rates, in the order they were declared."""
        return tuple(self._limits.values())

    @property
    def schedules(self) -> tuple[Schedule, ...]:
        """The registered schedules, in the order they were registered."""
        return tuple(self._schedules.values())

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues a worker on this registry serves when none are named: those given to
        ``JobRegistry(queues=...)``, then each schedule's queue not already among them, each
        once. Empty when there are neither."""
        scheduled = (schedule.queue for schedule in self._schedules.values())
        return tuple(dict.fromkeys((*self._queues, *scheduled)))

    def for_job(self, job: object) -> JobRegistration:
        """The registration for ``job``'s exact type, or :class:`UnknownJobTypeError`."""
        entry = self._by_type.get(type(job))
        if entry is None:
            raise UnknownJobTypeError(type(job).__qualname__)
        return entry

    @overload
    def get(self, wire_name: str) -> JobRegistration | None: ...
    @overload
    def get(self, wire_name: str, default: JobRegistration) -> JobRegistration: ...
    def get(self, wire_name: str, default: JobRegistration | None = None) -> JobRegistration | None:
        """The registration for a stored wire name, or ``default``."""
        return self._by_name.get(wire_name, default)

    def __contains__(self, wire_name: object) -> bool:
        return wire_name in self._by_name

    def __iter__(self) -> Iterator[JobRegistration]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)
