"""Job ids: UUID version 7 (RFC 9562), time-ordered so new rows land at the end of the index."""

from __future__ import annotations

import secrets
from uuid import UUID

__all__ = ["uuid7"]


def uuid7(unix_ms: int) -> UUID:
    """A version-7 UUID for ``unix_ms``: 48 bits of milliseconds, then 74 random bits."""
    rand = secrets.randbits(74)
    value = (unix_ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version
    value |= (rand >> 62) << 64  # 12 random bits
    value |= 0b10 << 62  # RFC 4122 variant
    value |= rand & ((1 << 62) - 1)  # 62 random bits
    return UUID(int=value)
