"""Loading the application's job registry from a ``module:attribute`` path the operator names on
the command line. Only a path given by the operator is ever imported; nothing read from the
database selects code."""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING

from caravel.errors import ValidationError

if TYPE_CHECKING:
    from caravel.registry import JobRegistry

__all__ = ["load_registry"]


def load_registry(path: str) -> JobRegistry:
    """Import ``module:attribute`` and return the :class:`JobRegistry` it names.

    The attribute may also be a function taking no arguments that returns the registry. The
    current directory is importable, as with ``python -m``.
    """
    from caravel.registry import JobRegistry

    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValidationError("app", "must look like package.module:registry")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValidationError("app", f"module {module_name!r} could not be imported") from exc
    target = getattr(module, attribute, None)
    if callable(target) and not isinstance(target, JobRegistry):
        target = target()
    if not isinstance(target, JobRegistry):
        raise ValidationError("app", f"{path!r} is not a caravel.JobRegistry")
    return target
