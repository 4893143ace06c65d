"""The async context manager every resource-holding object of the library is: ``async with`` it,
or call ``close()`` (which may be called again harmlessly)."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["AsyncClosing"]


class AsyncClosing:
    """``async with obj:`` closes ``obj`` on the way out."""

    async def close(self) -> None:
        """Release what the object holds."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
