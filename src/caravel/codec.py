"""Canonical JSON for job payloads.

Idempotency compares payloads exactly as stored, so the same job value must always produce the
same text: keys sorted, no insignificant whitespace, non-ASCII kept as UTF-8, and no NaN or
infinity (they have no JSON spelling and would not round-trip). Decoding goes through the
pydantic adapter of the type registered for the wire name, and nothing else: no name read from
the database is ever imported or evaluated.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic_core import PydanticSerializationError

from caravel.errors import ValidationError
from caravel.validation import MAX_JSON_DEPTH

__all__ = [
    "PayloadDecodeError",
    "decode_payload",
    "encode_dumped",
    "encode_dumped_together",
    "encode_payload",
    "json_depth",
]


class PayloadDecodeError(Exception):
    """A stored payload could not be read as its registered type (internal; the worker turns it
    into the ``InvalidPayload`` failure category)."""


_NESTED = (dict, list, tuple, set, frozenset)
#: Scalars that need no check: each has one exact JSON spelling.
_PLAIN = frozenset({int, bool, type(None)})
#: Containers that pydantic's JSON mode leaves as they are (a tuple becomes a list, which the
#: encoder writes the same way).
_NATIVE_CONTAINERS = frozenset({dict, list, tuple})
_NATIVE_SCALARS = _PLAIN | {str, float}


def _canonical_encoder() -> Callable[[object], str]:
    """Keys sorted, no insignificant whitespace, UTF-8 kept, NaN and infinity refused.

    ``json.JSONEncoder.encode`` builds the standard library's C encoder on every call, which
    cost more than encoding a small job; this builds it once. Without the C accelerator the
    plain encoder serves. There is no circular-reference check: payloads reach here as the
    output of pydantic's JSON mode, already within the depth limit."""
    encoder = json.JSONEncoder(
        sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython has it
        return encoder.encode
    one_shot = make(
        None, encoder.default, json.encoder.encode_basestring, None, ":", ",", True, False, False
    )

    def encode(value: object) -> str:
        return "".join(one_shot(value, 0))

    return encode


_canonical = _canonical_encoder()


def _walk(value: object, *, check: bool) -> tuple[int, bool]:
    """Nesting depth of a JSON-compatible value: scalars are 0, ``[]`` and ``{}`` are 1. It stops
    descending once past the limit, so the answer is exact up to ``MAX_JSON_DEPTH + 1``.

    With ``check``, it also rejects what JSON mode would silently rewrite: non-finite floats
    (pydantic turns them into ``null``) and strings, mapping keys included, that are not valid
    Unicode (lone surrogates become replacement characters); and the second answer tells whether
    the value holds only JSON's own types (dicts with string keys, lists, tuples, strings,
    integers, finite floats, booleans and ``None``, of exactly those classes), which JSON mode
    leaves as they are. (Without ``check`` that answer means nothing.)

    Iterative, so a hostile, deeply nested value cannot exhaust the interpreter's stack.
    """
    if not isinstance(value, _NESTED):
        if check:
            _check_scalar(value)
        return 0, type(value) in _NATIVE_SCALARS
    native = type(value) in _NATIVE_CONTAINERS
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > MAX_JSON_DEPTH:
                return deepest, False
        children: Any = item
        if isinstance(item, dict):
            children = item.values()
            if check:
                for key in item:
                    if type(key) is str and key.isascii():
                        continue
                    native = native and type(key) is str
                    if isinstance(key, _NESTED):
                        stack.append((key, depth + 1))
                    else:
                        _check_scalar(key)
        for child in children:
            kind = type(child)
            if kind in _PLAIN:
                continue
            if kind is str:
                if check and not child.isascii():
                    _require_unicode(child)
            elif isinstance(child, _NESTED):
                native = native and kind in _NATIVE_CONTAINERS
                stack.append((child, depth + 1))
            else:
                native = native and kind is float
                if check:
                    _check_scalar(child)
    return deepest, native


def json_depth(value: object) -> int:
    """Nesting depth of a JSON-compatible value: scalars are 0, ``[]`` and ``{}`` are 1.

    Iterative, so a hostile, deeply nested value cannot exhaust the interpreter's stack.
    """
    return _walk(value, check=False)[0]


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


@functools.lru_cache(maxsize=1024)
def _same_in_both_modes(adapter: TypeAdapter[Any]) -> bool:
    """Whether ``adapter`` serializes with no custom serializer anywhere in its schema: then
    JSON mode changes only what is not already JSON (dates, UUIDs, enums, sets, ...), and a
    Python-mode dump that holds only JSON's own types is exactly what JSON mode would return.
    A custom serializer may answer differently in JSON mode, so its types always take both
    dumps. Looked up once per adapter (a bounded cache: adapters live as long as their
    registrations, and a weak mapping's lookup cost as much as a small job's dump)."""
    return not _has_custom_serializer(adapter.core_schema)


def _has_custom_serializer(schema: object) -> bool:
    pending = [schema]
    seen: set[int] = set()
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            if "serialization" in node:
                return True
            pending.extend(node.values())
        elif isinstance(node, list | tuple):
            pending.extend(node)
    return False


def encode_dumped_together(
    adapter: TypeAdapter[Any], dumped: list[object], max_bytes: int
) -> list[str] | None:
    """:func:`encode_dumped` for many jobs of one type at once, given the Python-mode dumps of
    all of them: their texts, or ``None`` when any needs a look of its own (a type with a custom
    serializer, a value JSON mode would rewrite, a nesting near the limit, non-ASCII text, a
    payload over ``max_bytes``), and :func:`encode_dumped` job by job then gives each its own
    text or error. One walk of the whole list checks every job as a walk of each would: the
    list's depth is one more than its deepest job's, and it holds only JSON's own types when
    each job does."""
    if not _same_in_both_modes(adapter):
        return None
    try:
        depth, native = _walk(dumped, check=True)
        if not native or depth > MAX_JSON_DEPTH:  # a job nested MAX_JSON_DEPTH deep goes alone
            return None
        texts = list(map(_canonical, dumped))
    except (ValidationError, ValueError, TypeError, RecursionError):
        return None
    if not all(map(str.isascii, texts)) or max(map(len, texts), default=0) > max_bytes:
        return None
    return texts


def encode_payload(
    adapter: TypeAdapter[Any], job: object, max_bytes: int, *, job_type: str | None = None
) -> str:
    """The canonical JSON text for ``job``, after checking values, depth, encoding and size.

    The text is the canonical form of pydantic's JSON-mode dump. The checks need the Python-mode
    dump; when that holds only JSON's own types and the type has no custom serializer, it is the
    JSON-mode dump already, and the second dump, a large part of a small job's cost, is skipped.
    ``job_type`` (the wire name) is named by errors that point at one field."""
    try:
        python = adapter.dump_python(job, mode="python")
    except (PydanticSerializationError, ValueError, TypeError, RecursionError):
        raise _serialization_error(job, job_type) from None
    return encode_dumped(adapter, job, python, max_bytes, job_type=job_type)


def encode_dumped(
    adapter: TypeAdapter[Any],
    job: object,
    python: object,
    max_bytes: int,
    *,
    job_type: str | None = None,
) -> str:
    """:func:`encode_payload` for a ``job`` whose Python-mode dump by ``adapter`` is ``python``
    (a bulk enqueue dumps all the jobs of one type in one call)."""
    try:
        depth, native = _walk(python, check=True)
        if depth > MAX_JSON_DEPTH:
            raise ValidationError("payload", f"must be nested at most {MAX_JSON_DEPTH} levels deep")
        if native and _same_in_both_modes(adapter):
            plain = python
        else:
            plain = adapter.dump_python(job, mode="json")
            if json_depth(plain) > MAX_JSON_DEPTH:
                raise ValidationError(
                    "payload", f"must be nested at most {MAX_JSON_DEPTH} levels deep"
                )
    except (PydanticSerializationError, ValueError, TypeError, RecursionError) as exc:
        if isinstance(exc, ValidationError):
            raise
        raise _serialization_error(job, job_type) from None
    try:
        text = _canonical(plain)
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


def _serialization_error(job: object, job_type: str | None) -> ValidationError:
    """Why pydantic could not dump ``job`` to JSON, naming the field when it is bytes that are
    not UTF-8 (pydantic writes bytes to JSON as UTF-8 text unless told otherwise)."""
    path = _undecodable_bytes(job)
    if path is None:
        return ValidationError("payload", "must serialize to JSON")
    of = f" (job type {job_type})" if job_type is not None else ""
    return ValidationError(
        f"payload{path}",
        f"bytes must be valid UTF-8{of}: JSON carries bytes as UTF-8 text, so send text, or "
        "binary data as base64 (a str field, or a model with ser_json_bytes and val_json_bytes "
        "set to 'base64')",
    )


def _undecodable_bytes(job: object) -> str | None:
    """Where ``job`` first holds bytes that are not UTF-8, as a path of field names and list
    positions (``.parts[2].data``), or ``None``. Mapping keys are payload data, never schema, so
    the path shows them as ``[*]``. Reached only after the depth check passed."""
    pending: list[tuple[object, str, int]] = [(job, "", 0)]
    while pending:
        value, path, depth = pending.pop()
        if isinstance(value, bytes | bytearray):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                return path
            continue
        if depth > MAX_JSON_DEPTH:
            continue
        children: list[tuple[object, str]]
        if isinstance(value, BaseModel):
            children = [(getattr(value, n), f"{path}.{n}") for n in type(value).model_fields]
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = dataclasses.fields(value)
            children = [(getattr(value, f.name), f"{path}.{f.name}") for f in fields]
        elif isinstance(value, dict):
            children = [(c, f"{path}[*]") for item in value.items() for c in item]
        elif isinstance(value, list | tuple):
            children = [(c, f"{path}[{i}]") for i, c in enumerate(value)]
        elif isinstance(value, set | frozenset):
            children = [(c, f"{path}[*]") for c in value]
        else:
            continue
        # Reversed onto the stack, so fields are searched in their declared order.
        pending.extend((c, p, depth + 1) for c, p in reversed(children))
    return None


def decode_payload(adapter: TypeAdapter[Any], text: str) -> Any:
    """The job value stored as ``text``; raises :class:`PayloadDecodeError` when it cannot be
    read as the registered type."""
    try:
        return adapter.validate_json(text)
    except (ValueError, TypeError, RecursionError):
        raise PayloadDecodeError from None
