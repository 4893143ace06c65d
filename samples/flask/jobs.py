"""The welcome job: its stored contract and its synchronous, repeat-safe handler.

The payload carries the signup's id and nothing else: the email stays in the application's
table, out of the queue's rows (and out of anything that reads them, such as the dashboard).
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from caravel_samples.flask.models import Signup
from sqlalchemy.orm import Session, sessionmaker

from caravel import Clock, JobContext, JobRegistry

QUEUE = "signups"
#: The wire name is a stored contract: a new payload shape gets a new name (``.v2``).
WELCOME = "signups.welcome.v1"


@dataclass(frozen=True)
class SendWelcome:
    """Welcome the person who made signup ``signup_id``."""

    signup_id: UUID


def build_registry(sessions: sessionmaker[Session], clock: Clock) -> JobRegistry:
    """The sample's registry, its handler bound to the application's database through
    ``sessions``. The web process and the worker each build one on their own engine."""
    registry = JobRegistry()

    # A plain ``def``: the worker runs it in a thread, so blocking SQLAlchemy calls are fine.
    @registry.handles(WELCOME, SendWelcome)
    def welcome(job: SendWelcome, ctx: JobContext[None]) -> None:
        with sessions.begin() as db:
            signup = db.get(Signup, job.signup_id)
            # The job commits with its signup, so a missing row was deleted since: nothing to
            # do. A run after a crash finds the mark already set and leaves it as it was.
            if signup is not None and signup.welcomed_at_ms is None:
                signup.welcomed_at_ms = clock.now_ms()

    return registry
