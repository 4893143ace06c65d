"""Loading what the operator names on the command line as ``module:attribute``: the job
registry (``--app``) and the dashboard's ``--authorize`` function. Only a path the operator
typed is ever imported; nothing read from the database selects code.

A module that fails to import says why: the module named is not there, or the operator's own
module raised while importing (its error's type and first line are shown, since it is the
operator's code, not a payload). A missing attribute, or one of the wrong kind, is named.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

from caravel.errors import ValidationError

if TYPE_CHECKING:
    from caravel.registry import JobRegistry

__all__ = ["load_attribute", "load_registry"]


def load_attribute(path: str, option: str, kind: str) -> Any:
    """Import ``module:attribute`` for ``option`` (``app``, ``authorize``) and return the
    attribute. ``kind`` says what it should be, for the messages. The current directory is
    importable, as with ``python -m``."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValidationError(option, f"must look like package.module:{kind}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ValidationError(
                option, f"module {module_name!r} could not be imported: it was not found"
            ) from exc
        raise _raised_inside(option, module_name, exc) from exc
    except Exception as exc:  # the operator's module raised while it was imported
        raise _raised_inside(option, module_name, exc) from exc
    if not hasattr(module, attribute):
        raise ValidationError(option, f"module {module_name!r} has no attribute {attribute!r}")
    return getattr(module, attribute)


def _raised_inside(option: str, module_name: str, exc: BaseException) -> ValidationError:
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    cause = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return ValidationError(option, f"module {module_name!r} could not be imported: {cause}")


def load_registry(path: str) -> JobRegistry:
    """The :class:`~caravel.JobRegistry` that ``module:attribute`` names. Anything else (a
    class, a function) is refused, never called."""
    from caravel.registry import JobRegistry

    target = load_attribute(path, "app", "registry")
    if not isinstance(target, JobRegistry):
        raise ValidationError(
            "app", f"{path!r} is of type {type(target).__name__}, not a caravel.JobRegistry"
        )
    return target
