"""Ending a worker's own tasks when it stops, in bounded time.

A cancel is a request the task may not honour: a driver can swallow the ``CancelledError`` that
lands inside its own await and return as if never cancelled (asyncmy's connect did, through
``asyncio.wait_for`` before Python 3.12), and a loop that then carries on waits for more work for
ever. So the stop never relies on one cancel: a task still running after a moment is cancelled
again, with longer pauses each time, and one still running after :data:`PATIENCE` is left behind
(logged) so the stop can finish.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

__all__ = ["PATIENCE", "cancel_and_wait"]

logger = logging.getLogger("caravel.worker")

#: The longest a stop waits for the tasks it cancelled, cancelling again meanwhile.
PATIENCE = 10.0
#: The first pause before a task still running is cancelled again; each next pause is twice as
#: long. Long enough that a task tidying up after its first cancel (a rollback, a close) is not
#: cut short in the ordinary case.
AGAIN_AFTER = 0.5


async def cancel_and_wait(
    tasks: Iterable[asyncio.Future[Any]],
    *,
    again_after: float = AGAIN_AFTER,
    patience: float = PATIENCE,
) -> set[asyncio.Future[Any]]:
    """Cancel ``tasks`` and wait until they end, cancelling again those that go on (see the
    module's docstring). Returns the ones still running after ``patience`` seconds: nothing
    waits for them any more. Their errors are taken and dropped (their owners reported them)."""
    every = list(tasks)
    pending = {task for task in every if not task.done()}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    pause = again_after
    while pending:
        for task in pending:
            task.cancel()
        left = deadline - loop.time()
        if left <= 0:
            break
        _, pending = await asyncio.wait(pending, timeout=min(pause, left))
        pause *= 2
    for task in every:
        if task.done() and not task.cancelled():
            task.exception()  # taken, so asyncio does not log it as never retrieved
    for task in pending:
        name = task.get_name() if isinstance(task, asyncio.Task) else repr(task)
        logger.warning(
            "a worker task did not end when cancelled; the stop goes on without it",
            extra={"task": name},
        )
    return pending
