"""Named crash points for fault-injection tests.

``CARAVEL_FAILPOINT`` (read once, at import) lists names separated by ``|`` or ``,``; when the code
reaches a listed point, the process kills itself with SIGKILL, exactly as a power cut or the OOM
killer would. With the variable unset, :func:`failpoint` is a set lookup on an empty set.

Points: ``after_claim``, ``after_handler_before_ack``, ``after_ack``, ``relay_after_enqueue``.
For tests only; never set it in production.
"""

from __future__ import annotations

import os
import re
import signal

__all__ = ["ACTIVE", "failpoint"]

ACTIVE: frozenset[str] = frozenset(
    name for name in re.split(r"[|,\s]+", os.environ.get("CARAVEL_FAILPOINT", "")) if name
)


def failpoint(name: str) -> None:
    """Kill this process with SIGKILL if ``name`` is enabled."""
    if name in ACTIVE:
        os.kill(os.getpid(), signal.SIGKILL)
