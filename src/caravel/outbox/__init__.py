"""The transactional outbox: commit application rows and a job intent in one transaction, and a
relay that delivers the intents to the queue.

This package is the one place outside the store where SQLAlchemy's ORM appears: the outbox table
lives in the *application's* metadata and sessions.
"""

from caravel.outbox.relay import OutboxRelay
from caravel.outbox.staging import Outbox, StagedIntent
from caravel.outbox.table import OUTBOX_TABLE, OutboxEnvelope, add_outbox

__all__ = ["OUTBOX_TABLE", "Outbox", "OutboxEnvelope", "OutboxRelay", "StagedIntent", "add_outbox"]
