"""Public names resolved on first use (PEP 562), so importing a package costs only what its
caller touches."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str,
    namespace: dict[str, Any],
    homes: Mapping[str, str],
    *,
    modules: Collection[str] = (),
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name in ``homes`` is imported from the
    module named there, and each of ``modules`` is the submodule of that name (fixed tables,
    never a name from outside); what was found is kept in ``namespace``."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is not None:
            value = getattr(importlib.import_module(home), name)
        elif name in modules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value  # found directly from now on
        return value

    return __getattr__
