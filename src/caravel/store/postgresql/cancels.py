"""Cancel notices over LISTEN/NOTIFY: a cancel of running jobs sends their ids on
:data:`CANCEL_CHANNEL` inside its own transaction (so the notice is delivered exactly when the
cancel commits), and each worker listens for the ids of the jobs it runs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from uuid import UUID

import psycopg
import sqlalchemy as sa

from caravel.store.postgresql.connections import CONNECT_ARGS

__all__ = ["CANCEL_CHANNEL", "CANCEL_NOTIFY", "listen_cancels", "notice_payloads"]

logger = logging.getLogger("caravel.store")

#: The channel cancels of running jobs are announced on; the payload is comma-separated job ids.
CANCEL_CHANNEL = "caravel_cancels"
CANCEL_NOTIFY = sa.text(f"SELECT pg_notify('{CANCEL_CHANNEL}', :ids)")
#: Ids per notice: 36 characters and a comma each stay well below NOTIFY's 8000-byte payload.
_IDS_PER_NOTICE = 150
_RETRY_SECONDS = 1.0


def notice_payloads(job_ids: Sequence[UUID]) -> list[str]:
    """The payloads that announce ``job_ids``, as few as the payload limit allows."""
    return [
        ",".join(str(job_id) for job_id in job_ids[start : start + _IDS_PER_NOTICE])
        for start in range(0, len(job_ids), _IDS_PER_NOTICE)
    ]


async def listen_cancels(dsn: str) -> AsyncIterator[UUID]:
    """Ids of cancelled running jobs, over a dedicated connection to ``dsn`` outside the pool.
    A lost connection is re-opened after a pause; the worker's polling covers the gap."""
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(
                dsn, autocommit=True, **CONNECT_ARGS
            ) as conn:
                await conn.execute(f"LISTEN {CANCEL_CHANNEL}")
                async for note in conn.notifies():
                    for text in note.payload.split(","):
                        try:
                            yield UUID(text)
                        except ValueError:
                            continue  # not one of ours: nothing to cancel
        except psycopg.Error as exc:
            logger.warning(
                "cancel listener lost its connection; polling until it is back",
                extra={"error_type": type(exc).__name__},
            )
        await asyncio.sleep(_RETRY_SECONDS)
