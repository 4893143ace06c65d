"""Accounts and server-side sessions in the database.

A session is a row; deleting it signs the cookie out on its next request, so revocation takes
effect at once. Password hashing runs in a worker thread to keep the event loop responsive.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import timedelta
from uuid import UUID

import sqlalchemy as sa
from caravel_samples.backend import security
from caravel_samples.backend.db import reading, sessions, users, writing
from caravel_samples.backend.timerange import now_ms
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

#: ``job.read`` lets an account list jobs: every account holds it for its own tenant.
#: ``job.read.all`` widens that to every tenant; only operators hold it.
MEMBER_PERMISSIONS = frozenset({"job.read"})
OPERATOR_PERMISSIONS = frozenset({"job.read", "job.read.all", "metrics.read"})


@dataclass(frozen=True, slots=True)
class User:
    id: UUID
    email: str
    is_operator: bool

    @property
    def tenant_id(self) -> str:
        """The queue tenant of everything this user submits: their id, as text."""
        return str(self.id)

    @property
    def permissions(self) -> frozenset[str]:
        return OPERATOR_PERMISSIONS if self.is_operator else MEMBER_PERMISSIONS

    @property
    def reads_all_tenants(self) -> bool:
        return "job.read.all" in self.permissions


class EmailTakenError(Exception):
    """An account with this email address exists already."""


async def create_user(
    engine: AsyncEngine, email: str, password: str, *, operator: bool = False
) -> User:
    """Create an account. ``email`` must already be normalized and ``password`` checked
    against the new-password rule. Raises :class:`EmailTakenError`."""
    password_hash = await asyncio.to_thread(security.hash_password, password)
    user = User(id=uuid.uuid4(), email=email, is_operator=operator)
    try:
        async with writing(engine) as conn:
            await conn.execute(
                users.insert().values(
                    id=user.id,
                    email=email,
                    password_hash=password_hash,
                    is_operator=operator,
                    created_at=now_ms(),
                )
            )
    except IntegrityError:
        raise EmailTakenError from None
    return user


async def authenticate(engine: AsyncEngine, email: str, password: str) -> User | None:
    """The account for these credentials, or ``None`` for any mismatch (unknown email or wrong
    password alike, in about the same time)."""
    async with reading(engine) as conn:
        row = (
            await conn.execute(
                sa.select(
                    users.c.id, users.c.email, users.c.password_hash, users.c.is_operator
                ).where(users.c.email == email)
            )
        ).one_or_none()
    stored = None if row is None else str(row.password_hash)
    if not await asyncio.to_thread(security.verify_password, stored, password):
        return None
    assert row is not None
    if stored is not None and security.needs_rehash(stored):
        fresh = await asyncio.to_thread(security.hash_password, password)
        async with writing(engine) as conn:
            await conn.execute(
                users.update().where(users.c.id == row.id).values(password_hash=fresh)
            )
    return User(id=row.id, email=row.email, is_operator=bool(row.is_operator))


async def start_session(
    engine: AsyncEngine, user: User, lifetime: timedelta, *, replacing: str | None = None
) -> str:
    """A new session for ``user``; returns the token for the cookie. The session named by
    ``replacing`` (the cookie sent with the sign-in, if any) and the user's expired sessions are
    deleted in the same transaction, so every sign-in changes the session id."""
    token = security.new_session_token()
    now = now_ms()
    async with writing(engine) as conn:
        if replacing is not None:
            await conn.execute(
                sessions.delete().where(sessions.c.id == security.session_key(replacing))
            )
        await conn.execute(
            sessions.delete().where(sessions.c.user_id == user.id, sessions.c.expires_at <= now)
        )
        await conn.execute(
            sessions.insert().values(
                id=security.session_key(token),
                user_id=user.id,
                created_at=now,
                expires_at=now + int(lifetime / timedelta(milliseconds=1)),
            )
        )
    return token


async def session_user(engine: AsyncEngine, token: str) -> User | None:
    """The signed-in user for a cookie token, or ``None`` when the session does not exist, was
    revoked or has expired."""
    async with reading(engine) as conn:
        row = (
            await conn.execute(
                sa.select(users.c.id, users.c.email, users.c.is_operator)
                .select_from(sessions.join(users, sessions.c.user_id == users.c.id))
                .where(
                    sessions.c.id == security.session_key(token),
                    sessions.c.expires_at > now_ms(),
                )
            )
        ).one_or_none()
    if row is None:
        return None
    return User(id=row.id, email=row.email, is_operator=bool(row.is_operator))


async def end_session(engine: AsyncEngine, token: str) -> None:
    async with writing(engine) as conn:
        await conn.execute(sessions.delete().where(sessions.c.id == security.session_key(token)))


async def revoke_sessions(engine: AsyncEngine, user: User) -> int:
    """Delete every session of ``user``; returns how many there were."""
    async with writing(engine) as conn:
        result = await conn.execute(sessions.delete().where(sessions.c.user_id == user.id))
    return int(result.rowcount)
