"""Signing someone up: the signup row and its welcome job in one transaction.

The job is inserted through :meth:`caravel.SyncQueue.enqueue` with ``session=``, on the
transaction the row is written in, so the two commit together or not at all: a failure after
the enqueue (here, the unique email index, checked when the row is flushed after the job's
insert) rolls the job back with the row, and no worker ever sees a job for a signup that does
not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import NAMESPACE_URL, UUID, uuid4, uuid5

from caravel_samples.flask.jobs import QUEUE, SendWelcome
from caravel_samples.flask.models import Signup
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from caravel import Clock, DispatchOptions, SyncQueue, ValidationError

#: Signup ids made from an idempotency key: the same key always names the same signup (and so
#: the same job payload), whichever process or thread receives the retry.
_KEYED_IDS = uuid5(NAMESPACE_URL, "https://caravel.invalid/samples/flask/signups")


class ConflictError(ValidationError):
    """Well-formed input that contradicts what is stored (HTTP 409). Nothing was written."""


@dataclass(frozen=True)
class Accepted:
    """A signup and its welcome job; ``replayed`` when an earlier request with the same
    idempotency key made them."""

    signup_id: UUID
    job_id: UUID
    replayed: bool


class Signups:
    """Signing up, bound to the application's sessions, queue and clock."""

    def __init__(self, sessions: sessionmaker[Session], queue: SyncQueue, clock: Clock) -> None:
        self._sessions = sessions
        self._queue = queue
        self._clock = clock

    def sign_up(self, email: str, idempotency_key: str | None) -> Accepted:
        """Save a signup for ``email`` (already normalized) and enqueue its welcome.

        With a key, a retry of the same request returns what the first one made, and the key
        with another email raises :class:`ConflictError`. An email already signed up raises
        :class:`ConflictError` too."""
        signup_id = uuid5(_KEYED_IDS, idempotency_key) if idempotency_key else uuid4()
        try:
            return self._insert(signup_id, email, idempotency_key)
        except IntegrityError:
            pass  # rolled back, job included
        # Either the email is taken, or a concurrent request with this key committed first.
        if idempotency_key is not None:
            with self._sessions() as db:
                existing = db.get(Signup, signup_id)
                if existing is not None:
                    return _replayed(existing, email)
        raise ConflictError("email", "is already signed up")

    def _insert(self, signup_id: UUID, email: str, key: str | None) -> Accepted:
        with self._sessions.begin() as db:
            if key is not None:
                existing = db.get(Signup, signup_id)
                if existing is not None:
                    return _replayed(existing, email)
            signup = Signup(id=signup_id, email=email, created_at_ms=self._clock.now_ms())
            db.add(signup)
            # The job's row is written first, in this transaction; the signup's at the flush.
            accepted = self._queue.enqueue(
                SendWelcome(signup_id),
                DispatchOptions(queue=QUEUE, idempotency_key=key),
                session=db,
            )
            signup.welcome_job_id = accepted.job_id
            db.flush()  # the unique email index: a conflict raises here, before the commit
        return Accepted(signup_id, accepted.job_id, replayed=False)

    def find(self, signup_id: UUID) -> Signup | None:
        with self._sessions() as db:
            return db.get(Signup, signup_id)


def _replayed(existing: Signup, email: str) -> Accepted:
    if existing.email != email:
        raise ConflictError("Idempotency-Key", "was already used with a different body")
    return Accepted(existing.id, existing.welcome_job_id, replayed=True)
