"""The lease nonce: what tells two claims of a job apart when their tokens are the same.

A job's lease token counts its claims (and the releases that end a lease), so the attempt
history can key each attempt by it and keep the newest few by arithmetic on it. Counting is not
enough to fence across a failover with asynchronous replication: a claim the primary committed
but never shipped is lost with it, the promoted standby still has the job waiting under the old
token, and its next claim there counts to the very token the lost claim's holder presents.

So every claim also draws a nonce, a random number of :data:`NONCE_BITS` bits stored in the
claimed rows' ``lease_nonce`` (one draw per claim statement: the rows it takes differ by id
already), returned in :attr:`caravel.Lease.nonce`, and every write under a lease (complete,
fail, retry, snooze, renew, progress and meta) matches the job's id, token *and* nonce. Two
claims on two timelines draw independently: their leases share a fence only if the draws are
equal, one chance in 2**63, whatever the clocks say and whichever worker claims (one worker
reconnecting to the promoted standby, at the same millisecond of a test's manual clock,
included). Drawn in the process, not by the database, so every store draws it the same way.

The nonce costs the claim one more column written and each write one more column compared in
the row the primary key already found: no statement, no index.
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa

__all__ = ["NONCE", "NONCE_BITS", "draw"]

#: Random bits in a nonce: a positive BIGINT on every database.
NONCE_BITS = 63

#: A claim's nonce as its statement binds it.
NONCE = sa.bindparam("b_nonce", type_=sa.BigInteger())


def draw() -> int:
    """A fresh nonce for one claim, from the operating system's random source: never 0 (the
    nonce of a lease no claim handed out)."""
    return secrets.randbelow((1 << NONCE_BITS) - 1) + 1
