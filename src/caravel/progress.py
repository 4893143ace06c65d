"""Progress and metadata a running handler reports: ``ctx.progress(done, total, note)`` and
``ctx.set_meta(key, value)``.

What a handler reports is checked at the call (a bad value raises
:class:`~caravel.errors.ValidationError` naming the field, and changes nothing), kept as the JSON
text the jobs table stores, and handed to its worker through a :class:`ProgressReport`, which
the worker writes under the job's lease (:mod:`caravel.worker.progress`). Statuses read it back
as a :class:`JobProgress` and a mapping of metadata.

Progress is stored as ``{"done": ..., "total": ..., "note": ...}`` (at most
:data:`~caravel.limits.MAX_PROGRESS_BYTES`), metadata as one JSON object of the keys set (at most
:data:`~caravel.limits.MAX_META_BYTES`).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from caravel.clock import from_ms
from caravel.errors import ValidationError
from caravel.limits import MAX_META_BYTES, MAX_PROGRESS_BYTES, MAX_PROGRESS_NOTE_LENGTH
from caravel.validation import check_identifier, check_text

__all__ = [
    "MAX_PROGRESS_NUMBER",
    "JobProgress",
    "ProgressReport",
    "meta_from",
    "progress_from",
    "progress_text",
]

#: The largest ``done`` or ``total``: 2**53, the last integer JavaScript (the dashboard) and a
#: JSON float read exactly.
MAX_PROGRESS_NUMBER = 2**53


@dataclass(frozen=True, slots=True)
class JobProgress:
    """What a job's handler last reported through ``ctx.progress``: ``done`` of ``total``
    (``None`` when it gave none) with an optional ``note``, and when the worker wrote it. Kept
    after the job finishes; a later attempt's first report replaces it."""

    done: int | float
    total: int | float | None
    note: str | None
    updated_at: datetime

    @property
    def fraction(self) -> float | None:
        """``done / total`` from 0 to 1, or ``None`` without a total."""
        if self.total is None:
            return None
        return min(1.0, self.done / self.total)


def _number(field: str, value: object, *, positive: bool) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(field, "must be a number (int or float)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError(field, "must be finite (not NaN or infinity)")
    if positive and value <= 0:
        raise ValidationError(field, "must be greater than 0")
    if value < 0:
        raise ValidationError(field, "must not be negative")
    if value > MAX_PROGRESS_NUMBER:
        raise ValidationError(field, f"must be at most 2**53 ({MAX_PROGRESS_NUMBER:,})")
    return value


def progress_text(done: object, total: object = None, note: object = None) -> str:
    """The stored JSON of a progress report, once its values are checked: ``done`` from 0,
    ``total`` above 0 (or ``None``) and at least ``done``, both finite numbers up to 2**53;
    ``note`` ``None`` or at most :data:`~caravel.limits.MAX_PROGRESS_NOTE_LENGTH` characters
    without control characters. Raises :class:`ValidationError` naming the field otherwise."""
    done = _number("done", done, positive=False)
    if total is not None:
        total = _number("total", total, positive=True)
        if done > total:
            raise ValidationError("done", "must not be greater than total")
    if note is not None:
        check_text(note, "note", MAX_PROGRESS_NOTE_LENGTH)
    # Numbers as JSON writes them (an int as digits, a float by its shortest repr).
    text = (
        f'{{"done":{json.dumps(done)},"total":{json.dumps(total)},'
        f'"note":{json.dumps(note, ensure_ascii=False)}}}'
    )
    if len(text.encode("utf-8")) > MAX_PROGRESS_BYTES:  # not reached with the limits above
        raise ValidationError("note", f"makes the progress longer than {MAX_PROGRESS_BYTES} bytes")
    return text


def _value_text(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        raise ValidationError(
            "value", "must be a JSON value (dict, list, str, finite number, bool or None)"
        ) from None


def _meta_text(values: Mapping[str, str]) -> str:
    """The stored JSON object of ``values`` (each key's value already as JSON text)."""
    members = (json.dumps(key, ensure_ascii=False) + ":" + text for key, text in values.items())
    return "{" + ",".join(members) + "}"


def progress_from(text: str | None, at_ms: int | None) -> JobProgress | None:
    """A stored progress report read back (``None`` when the job has none)."""
    if text is None:
        return None
    found = json.loads(text)
    return JobProgress(
        done=found["done"],
        total=found.get("total"),
        note=found.get("note"),
        updated_at=from_ms(at_ms if at_ms is not None else 0),
    )


def meta_from(text: str | None) -> dict[str, Any]:
    """A job's stored metadata read back (empty when it has none)."""
    if text is None:
        return {}
    found: dict[str, Any] = json.loads(text)
    return found


class ProgressReport:
    """What a running handler reported that its worker has not written yet: the latest
    progress and, when a key was set since the last write, the whole metadata object, both as
    the JSON text to store. Safe to use from any thread: a synchronous handler reports from its
    own, the worker takes from the event loop.

    A report starts empty for each attempt: the metadata a handler sets replaces, when written,
    what an earlier attempt stored."""

    __slots__ = ("_listener", "_lock", "_meta", "_progress", "_told", "_values")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._progress: str | None = None
        self._meta: str | None = None
        #: This attempt's metadata, each key's value as JSON text.
        self._values: dict[str, str] = {}
        self._listener: Callable[[], None] | None = None
        #: The listener heard of the values pending now (it is told once until they are taken).
        self._told = False

    def listen(self, listener: Callable[[], None] | None) -> None:
        """Call ``listener`` (from the reporting thread) when a report arrives while nothing
        is pending; ``None`` stops that."""
        with self._lock:
            self._listener = listener
            self._told = False

    def progress(self, done: object, total: object = None, note: object = None) -> None:
        """See :meth:`caravel.JobContext.progress`."""
        text = progress_text(done, total, note)
        with self._lock:
            self._progress = text
            listener = self._tell()
        if listener is not None:
            listener()

    def set_meta(self, key: str, value: object) -> None:
        """See :meth:`caravel.JobContext.set_meta`."""
        key = check_identifier(key, "key")
        value_text = _value_text(value)
        with self._lock:
            values = {**self._values, key: value_text}
            text = _meta_text(values)
            if len(text) > MAX_META_BYTES // 4 and len(text.encode("utf-8")) > MAX_META_BYTES:
                raise ValidationError(
                    "value", f"makes the job's metadata longer than {MAX_META_BYTES} bytes as JSON"
                )
            self._values = values
            self._meta = text
            listener = self._tell()
        if listener is not None:
            listener()

    def _tell(self) -> Callable[[], None] | None:
        """The listener to call for a report that just arrived, if it has not heard already."""
        if self._told or self._listener is None:
            return None
        self._told = True
        return self._listener

    def take(self) -> tuple[str | None, str | None]:
        """The progress and metadata to write now (``None``: unchanged since the last take),
        and nothing pending after."""
        with self._lock:
            found = self._progress, self._meta
            self._progress = self._meta = None
            self._told = False
            return found

    def put_back(self, progress: str | None, meta: str | None) -> None:
        """Values taken that could not be written: pending again, unless newer ones arrived.
        The listener is not told (the writer that puts them back retries on its own)."""
        with self._lock:
            if self._progress is None:
                self._progress = progress
            if self._meta is None:
                self._meta = meta
            self._told = True
