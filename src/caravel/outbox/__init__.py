"""The transactional outbox: commit application rows and a job intent in one transaction, and a
relay that delivers the intents to the queue.

This package is the one place outside the store where SQLAlchemy's ORM appears: the outbox table
lives in the *application's* metadata and sessions. Its names are imported from their modules
when first used, so naming the default table (the command line does) loads nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from caravel._lazy import lazy_attributes

if TYPE_CHECKING:
    from caravel.outbox.relay import OutboxRelay
    from caravel.outbox.staging import Outbox, StagedIntent
    from caravel.outbox.table import OutboxEnvelope, add_outbox

__all__ = ["OUTBOX_TABLE", "Outbox", "OutboxEnvelope", "OutboxRelay", "StagedIntent", "add_outbox"]

#: The outbox table's default name.
OUTBOX_TABLE = "caravel_outbox"

_HOMES = {
    "OutboxRelay": "caravel.outbox.relay",
    "Outbox": "caravel.outbox.staging",
    "StagedIntent": "caravel.outbox.staging",
    "OutboxEnvelope": "caravel.outbox.table",
    "add_outbox": "caravel.outbox.table",
}


__getattr__ = lazy_attributes("caravel.outbox", globals(), _HOMES)
