"""A handler's result as the job stores it: JSON text within the queue's size limit, whether
it was returned or handed to ``ctx.complete_in``."""

from __future__ import annotations

import json

from caravel.jobs import FailureCategory

__all__ = ["encode_result"]


def encode_result(value: object, limit: int) -> str | FailureCategory:
    """A handler's return value as the JSON text to store, or the category of why it cannot
    be stored (not JSON, or more than ``limit`` UTF-8 bytes)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return FailureCategory.RESULT_NOT_SERIALIZABLE
    # A text has at least as many UTF-8 bytes as characters: only a short one needs encoding.
    if len(text) > limit or (len(text) * 4 > limit and len(text.encode("utf-8")) > limit):
        return FailureCategory.RESULT_TOO_LARGE
    return text
