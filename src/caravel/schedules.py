"""Periodic jobs: a :class:`Schedule` names a job and when it is due, by a five-field cron
expression (or a macro such as ``@hourly``) in an IANA time zone, or by a fixed interval.

Each due instant is a *slot*. A slot's job carries the idempotency key
``schedule:<name>:<slot in UTC, ISO 8601 to the millisecond>``, so however many schedulers race
for a slot the database keeps one job for it (the same payload under the same key is a repeat,
never a conflict), and no leader is needed.

Cron expressions are read on the zone's wall clock. Where daylight saving makes a wall time
that does not exist (a 02:30 slot on the spring-forward day), the slot is the first valid instant
after the gap (the moment the clocks jump), once; where a wall time happens twice (the fall-back
day), the slot is its first occurrence only. Intervals count from the Unix epoch in UTC, so
every process computes the same slots and daylight saving never moves them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from caravel.clock import from_ms
from caravel.errors import RegistrationError, ValidationError
from caravel.jobs import DEFAULT_TENANT, DispatchOptions
from caravel.limits import MAX_PRIORITY, MIN_PRIORITY
from caravel.validation import (
    check_identifier,
    check_int,
    check_max_attempts,
    check_queue_name,
    check_schedule_name,
)

__all__ = [
    "MACROS",
    "ON_TIME_GRACE",
    "MissedPolicy",
    "Schedule",
    "slot_key",
]

MissedPolicy = Literal["skip", "latest"]


#: The macros a cron schedule may use instead of five fields.
MACROS = frozenset(
    {"@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@annually", "@midnight"}
)

#: How late a slot may be found and still run under ``missed="skip"``: a scheduler that was
#: busy or restarted for less than this still enqueues the slot; later than this it is missed.
ON_TIME_GRACE = timedelta(minutes=1)

_MIN_EVERY = timedelta(seconds=1)
_MAX_EVERY = timedelta(days=366)
_US = timedelta(microseconds=1)
#: Where registration looks for a cron expression's next and previous slot. The Gregorian
#: calendar repeats every 400 years, and no five-field expression that matches at all goes
#: longer than 40 years without a match (29 February on a given weekday), well inside the 50
#: years croniter searches each way: an expression with both slots here has them from any time.
_PROBE = datetime(2000, 1, 1)


def slot_key(name: str, slot_ms: int) -> str:
    """The idempotency key of ``name``'s job for the slot at ``slot_ms``."""
    moment = from_ms(slot_ms).astimezone(UTC)
    return f"schedule:{name}:{moment.strftime('%Y-%m-%dT%H:%M:%S')}.{slot_ms % 1000:03d}Z"


def _ms_exact(moment: datetime) -> int:
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return delta // timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True, init=False)
class Schedule:
    """A periodic job, registered with :meth:`JobRegistry.schedule <caravel.JobRegistry.schedule>`.

    Attributes:
        name: unique, 1 to 64 of ``a-z 0-9 . _ -``; part of every slot's idempotency key, so
            renaming a schedule starts it afresh.
        job: the payload instance each slot enqueues (of a registered type).
        cron: a five-field cron expression or one of :data:`MACROS`, on ``timezone``'s wall
            clock, that matches some date (``0 9 31 6 *``, 31 June, is refused; 29 February
            is fine). Exactly one of ``cron`` and ``every``.
        every: a fixed interval (1 second to 366 days), counted from the Unix epoch in UTC.
        timezone: an IANA zone name for ``cron`` (default ``"UTC"``).
        queue, tenant_id, max_attempts, priority, tags: the slot's job's
            :class:`~caravel.DispatchOptions`.
        missed: what a scheduler does with slots that passed while no scheduler ran:
            ``"skip"`` (default) enqueues only a slot found within :data:`ON_TIME_GRACE` of its
            time and otherwise waits for the next one; ``"latest"`` enqueues the latest missed
            slot once. Never every missed slot.
    """

    name: str
    job: object = field(repr=False)  # a payload: kept out of logs
    queue: str
    cron: str | None = None
    every: timedelta | None = None
    timezone: str = "UTC"
    tenant_id: str = DEFAULT_TENANT
    missed: MissedPolicy = "skip"
    max_attempts: int | None = None
    priority: int | None = None
    tags: Sequence[str] = field(default=())
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        name: str,
        job: object,
        *,
        queue: str,
        cron: str | None = None,
        every: timedelta | None = None,
        timezone: str = "UTC",
        tenant_id: str = DEFAULT_TENANT,
        missed: MissedPolicy = "skip",
        max_attempts: int | None = None,
        priority: int | None = None,
        tags: Sequence[str] = (),
    ) -> None:
        values: dict[str, Any] = {
            "name": name,
            "job": job,
            "queue": queue,
            "cron": cron,
            "every": every,
            "timezone": timezone,
            "tenant_id": tenant_id,
            "missed": missed,
            "max_attempts": max_attempts,
            "priority": priority,
            "tags": tuple(tags) if not isinstance(tags, str) else tags,
        }
        for key, value in values.items():
            object.__setattr__(self, key, value)
        try:
            self._validate()
        except RegistrationError:
            raise
        except ValidationError as exc:
            raise RegistrationError(exc.field, exc.rule) from None

    def _validate(self) -> None:
        check_schedule_name(self.name)
        check_queue_name(self.queue)
        check_identifier(self.tenant_id, "tenant_id")
        if (self.cron is None) == (self.every is None):
            raise RegistrationError("cron", "exactly one of cron and every must be given")
        if self.cron is not None:
            _check_cron(self.cron)
        if self.every is not None:
            if not isinstance(self.every, timedelta):
                raise RegistrationError("every", "must be a datetime.timedelta")
            if not _MIN_EVERY <= self.every <= _MAX_EVERY:
                raise RegistrationError("every", "must be from 1 second to 366 days")
            if self.every % timedelta(milliseconds=1):
                raise RegistrationError("every", "must be whole milliseconds")
        if not isinstance(self.timezone, str):
            raise RegistrationError("timezone", "must be an IANA time zone name")
        try:
            zone = ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise RegistrationError("timezone", "must be an IANA time zone name") from None
        object.__setattr__(self, "_zone", zone)
        if self.missed not in ("skip", "latest"):
            raise RegistrationError("missed", "must be 'skip' or 'latest'")
        if self.max_attempts is not None:
            check_max_attempts(self.max_attempts)
        if self.priority is not None:
            check_int("priority", self.priority, MIN_PRIORITY, MAX_PRIORITY)
        if isinstance(self.tags, str):
            raise RegistrationError("tags", "must be a sequence of strings, not one string")
        # The options every slot's job will carry, checked now rather than at the first slot.
        self.dispatch(0)

    def dispatch(self, slot_ms: int) -> DispatchOptions:
        """The options of the job for the slot at ``slot_ms``."""
        return DispatchOptions(
            queue=self.queue,
            tenant_id=self.tenant_id,
            idempotency_key=slot_key(self.name, slot_ms),
            max_attempts=self.max_attempts,
            priority=self.priority,
            tags=tuple(self.tags),
        )

    # ----- slots ---------------------------------------------------------------------------

    def latest_slot(self, now_ms: int) -> int:
        """The latest slot at or before ``now_ms`` (ms since the epoch)."""
        if self.every is not None:
            step = self.every // timedelta(milliseconds=1)
            return now_ms - now_ms % step
        assert self.cron is not None  # validated: exactly one of cron and every
        wall = _wall(now_ms, self._zone) + _US  # get_prev is strictly before its start
        return self._instant(croniter(self.cron, wall).get_prev(datetime))

    def next_slot(self, now_ms: int) -> int:
        """The first slot after ``now_ms``."""
        if self.every is not None:
            step = self.every // timedelta(milliseconds=1)
            return now_ms - now_ms % step + step
        assert self.cron is not None
        walk = croniter(self.cron, _wall(now_ms, self._zone))
        while True:
            slot = self._instant(walk.get_next(datetime))
            if slot > now_ms:  # a wall time in a repeated hour can map before now
                return slot

    def _instant(self, wall: datetime) -> int:
        """The slot of a wall-clock time in the zone: its first occurrence, or the end of the
        gap when daylight saving skips it."""
        first = wall.replace(tzinfo=self._zone, fold=0)
        if first.astimezone(UTC).astimezone(self._zone).replace(tzinfo=None) == wall:
            return _ms_exact(first)
        # Not a wall time of this day: the clocks jumped over it. The jump is between the
        # readings with the offsets before and after it; find the instant by bisection.
        low = _ms_exact(wall.replace(tzinfo=self._zone, fold=1))
        high = _ms_exact(first)
        before = from_ms(low).astimezone(self._zone).utcoffset()
        while high - low > 1:
            middle = (low + high) // 2
            if from_ms(middle).astimezone(self._zone).utcoffset() == before:
                low = middle
            else:
                high = middle
        return high


def _wall(now_ms: int, zone: ZoneInfo) -> datetime:
    return from_ms(now_ms).astimezone(zone).replace(tzinfo=None)


def _check_cron(expression: object) -> None:
    if not isinstance(expression, str):
        raise RegistrationError("cron", "must be a string")
    text = expression.strip()
    if text.startswith("@"):
        if text.lower() not in MACROS:
            raise RegistrationError("cron", f"macro must be one of {', '.join(sorted(MACROS))}")
        return
    if len(text.split()) != 5:
        raise RegistrationError(
            "cron", "must have five fields (minute hour day month weekday) or be a macro"
        )
    if not croniter.is_valid(text):
        raise RegistrationError("cron", "must be a valid five-field cron expression")
    try:
        croniter(text, _PROBE).get_next(datetime)
        croniter(text, _PROBE).get_prev(datetime)
    except CroniterError:
        raise RegistrationError(
            "cron",
            "never matches: no month it names has that day of the month (31 June, 30 February)",
        ) from None
