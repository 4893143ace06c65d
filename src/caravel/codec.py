"""Canonical JSON for job payloads.

Idempotency compares payloads exactly as stored, so the same job value must always produce the
same text: keys sorted, no insignificant whitespace, non-ASCII kept as UTF-8, and no NaN or
infinity (they have no JSON spelling and would not round-trip). Decoding goes through the
pydantic adapter of the type registered for the wire name, and nothing else: no name read from
the database is ever imported or evaluated.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import TypeAdapter
from pydantic_core import PydanticSerializationError

from caravel.errors import ValidationError
from caravel.validation import MAX_JSON_DEPTH

__all__ = ["PayloadDecodeError", "decode_payload", "encode_payload", "json_depth"]


class PayloadDecodeError(Exception):
    """A stored payload could not be read as its registered type (internal; the worker turns it
    into the ``InvalidPayload`` failure category)."""


_NESTED = (dict, list, tuple, set, frozenset)

#: Keys sorted, no insignificant whitespace, UTF-8 kept, NaN and infinity refused. Built once:
#: ``json.dumps`` with options builds an encoder per call.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def json_depth(value: object) -> int:
    """Nesting depth of a JSON-compatible value: scalars are 0, ``[]`` and ``{}`` are 1.

    Iterative, so a hostile, deeply nested value cannot exhaust the interpreter's stack.
    """
    if not isinstance(value, dict | list | tuple):
        return 0
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > MAX_JSON_DEPTH:
                return deepest
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, dict | list | tuple):
                stack.append((child, depth + 1))
    return deepest


def _check_values(value: object) -> None:
    """Reject what JSON mode would silently rewrite: non-finite floats (pydantic turns them into
    ``null``) and strings, including mapping keys, that are not valid Unicode (lone surrogates
    become replacement characters). Iterative, and stops descending past the depth limit."""
    if not isinstance(value, _NESTED):
        _check_scalar(value)
        return
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth >= MAX_JSON_DEPTH:
            raise ValidationError("payload", f"must be nested at most {MAX_JSON_DEPTH} levels deep")
        children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, _NESTED):
                stack.append((child, depth + 1))
            elif isinstance(child, float | str):
                _check_scalar(child)


def _check_scalar(item: object) -> None:
    if isinstance(item, float):
        if not math.isfinite(item):
            raise ValidationError("payload", "must not contain NaN or infinite numbers")
    elif isinstance(item, str) and not item.isascii():
        _require_unicode(item)


def _require_unicode(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(
            "payload", "must be valid Unicode text (no lone surrogates)"
        ) from None


def encode_payload(adapter: TypeAdapter[Any], job: object, max_bytes: int) -> str:
    """The canonical JSON text for ``job``, after checking values, depth, encoding and size."""
    try:
        _check_values(adapter.dump_python(job, mode="python"))
        plain = adapter.dump_python(job, mode="json")
    except (PydanticSerializationError, ValueError, TypeError, RecursionError) as exc:
        if isinstance(exc, ValidationError):
            raise
        raise ValidationError("payload", "must serialize to JSON") from None
    if json_depth(plain) > MAX_JSON_DEPTH:
        raise ValidationError("payload", f"must be nested at most {MAX_JSON_DEPTH} levels deep")
    try:
        text = _CANONICAL.encode(plain)
    except ValueError:
        raise ValidationError("payload", "must not contain NaN or infinite numbers") from None
    except (TypeError, RecursionError):
        raise ValidationError("payload", "must serialize to JSON") from None
    try:
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError(
            "payload", "must be valid Unicode text (no lone surrogates)"
        ) from None
    if size > max_bytes:
        raise ValidationError("payload", f"must be at most {max_bytes} bytes of UTF-8 JSON")
    return text


def decode_payload(adapter: TypeAdapter[Any], text: str) -> Any:
    """The job value stored as ``text``; raises :class:`PayloadDecodeError` when it cannot be
    read as the registered type."""
    try:
        return adapter.validate_json(text)
    except (ValueError, TypeError, RecursionError):
        raise PayloadDecodeError from None
