"""A handler completing its own job in its own transaction (``ctx.complete_in``): the worker's
side of it, and what the attempt's outcome is afterwards.

The completion is the acknowledger's fenced statement, run on the handler's connection
(:meth:`~caravel.worker.leases.Leases.complete_joined`); only that connection's commit makes it
count. So once the handler has returned, the worker must not complete the job a second time,
and must find out whether the commit happened (:func:`settled`):

* the job is completed under this attempt's lease: the attempt succeeded, with nothing left to
  write (:attr:`~caravel.worker.outcome.Outcome.committed`); what the handler returned or raised
  after the completion is ignored;
* otherwise the handler's transaction rolled back or was never committed: the attempt fails
  as ``CompletionNotCommitted`` when the handler returned (or as its own failure when it
  raised) and is retried by the job type's policy. That failure is fenced like every
  acknowledgement: if the caller's commit lands after all, it finds the job completed and
  changes nothing.
"""

from __future__ import annotations

import asyncio

from caravel.errors import ValidationError
from caravel.jobs import FailureCategory, Lease
from caravel.options import RetryPolicy
from caravel.worker.leases import Leases
from caravel.worker.outcome import Outcome
from caravel.worker.results import encode_result
from caravel.worker.watchdog import Abandoned

__all__ = ["AttemptCompletion", "settled"]

#: Why the watchdog abandons an attempt whose commit may have finished its job first.
_LEASE_ENDED = frozenset(
    {Abandoned.LEASE_LOST, Abandoned.LEASE_EXPIRED, Abandoned.LIFETIME_REACHED}
)

_ON_LOOP = (
    "complete_in_sync is for synchronous handlers, in their own thread; an async handler "
    "awaits ctx.complete_in (which takes a blocking session too)"
)


class AttemptCompletion:
    """One attempt's :class:`~caravel.context.JoinedCompletion`: completes its lease in the
    transaction of a session the handler passes. ``made`` says a completion held (its
    transaction may still roll back)."""

    __slots__ = ("_lease", "_leases", "_limit", "_loop", "made")

    def __init__(
        self, leases: Leases, lease: Lease, loop: asyncio.AbstractEventLoop, max_result_bytes: int
    ) -> None:
        self._leases = leases
        self._lease = lease
        self._loop = loop
        self._limit = max_result_bytes
        self.made = False

    def _encoded(self, result: object) -> str | None:
        if result is None:
            return None
        encoded = encode_result(result, self._limit)
        if encoded is FailureCategory.RESULT_NOT_SERIALIZABLE:
            raise ValidationError("result", "must be a value JSON can hold")
        if encoded is FailureCategory.RESULT_TOO_LARGE:
            raise ValidationError(
                "result", f"must be at most {self._limit} bytes as JSON (max_result_bytes)"
            )
        return str(encoded)

    async def complete(self, target: object, result: object) -> None:
        text = self._encoded(result)
        await self._leases.complete_joined(target, self._lease, text)
        self.made = True

    def complete_sync(self, target: object, result: object) -> None:
        text = self._encoded(result)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise ValidationError("session", _ON_LOOP)  # it would wait for its own loop
        identity = asyncio.run_coroutine_threadsafe(
            self._leases.database_identity(), self._loop
        ).result()
        self._leases.complete_joined_sync(target, self._lease, text, identity)
        self.made = True


async def settled(
    completion: AttemptCompletion | None,
    outcome: Outcome,
    leases: Leases,
    retry: RetryPolicy | None,
) -> Outcome:
    """The attempt's outcome once its handler stopped, given what it did with
    ``completion`` (see the module's docstring). A handler still running after its commit is
    cancelled at the lease's next renewal (the job is finished: the renewal is refused); that
    attempt succeeded all the same. Any other attempt abandoned without an outcome stays so:
    it writes nothing either way."""
    if completion is None or not completion.made:
        return outcome
    if outcome.abandoned is not None and outcome.abandoned not in _LEASE_ENDED:
        return outcome
    if await leases.completed_under(outcome.lease):
        return Outcome(outcome.lease, committed=True)
    if outcome.succeeded:
        category = FailureCategory.COMPLETION_NOT_COMMITTED
        return Outcome(outcome.lease, failure=category, retry=retry)
    return outcome
