"""Named crash points for fault-injection tests.

``CARAVEL_FAILPOINT`` (read once, at import) lists entries separated by ``|`` or ``,``. An entry
``name`` kills the process with SIGKILL when the code reaches that point, exactly as a power cut
or the OOM killer would. An entry ``name=stop`` stops it with SIGSTOP there instead, the first
time only, as a debugger, a frozen VM or a paused container would: once the test sends SIGCONT
the process carries on from that point. With the variable unset, :func:`failpoint` is a set
lookup on an empty set.

Points: ``after_claim``, ``after_handler_before_ack``, ``after_ack``, ``relay_after_enqueue``,
``limited_claim_before_commit`` (a limited claim that took jobs, inside its transaction, with the
queue's limits row still locked), ``bridge_before_publish`` and ``bridge_after_confirm`` (a broker
relay's pass, before publishing and after the broker confirmed, before recording),
``bridge_before_commit`` and ``bridge_after_commit`` (a broker consumer's pass, before the jobs'
transaction and after it committed, before acknowledging). For tests only; never set it in
production.
"""

from __future__ import annotations

import os
import re
import signal

__all__ = ["ACTIVE", "failpoint"]

_ENTRIES = [
    entry.partition("=")
    for entry in re.split(r"[|,\s]+", os.environ.get("CARAVEL_FAILPOINT", ""))
    if entry
]

#: Every point named, whatever it does there.
ACTIVE: frozenset[str] = frozenset(name for name, _, _ in _ENTRIES)

#: The points that stop the process instead, each as long as it has not fired yet.
_STOPS: set[str] = {name for name, _, action in _ENTRIES if action == "stop"}
_STOPPED: set[str] = set()


def failpoint(name: str) -> None:
    """Kill this process with SIGKILL if ``name`` is enabled; stop it with SIGSTOP instead
    (the first time) if it is enabled as ``name=stop``."""
    if name not in ACTIVE or name in _STOPPED:
        return
    if name in _STOPS:
        _STOPPED.add(name)
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    os.kill(os.getpid(), signal.SIGKILL)
