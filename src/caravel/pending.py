"""The rules of "one pending per key" (:attr:`~caravel.DispatchOptions.pending_key`): what a
dispatch may ask for, checked once when the options are built.

A pending key is an identifier with the rules of an idempotency key, and a job has at most one
of the two: each names the one row an insert settles against (the arbiter of its ``ON
CONFLICT``), and an insert has one.
"""

from __future__ import annotations

from datetime import timedelta

from caravel.errors import ValidationError
from caravel.validation import check_duration, check_identifier

__all__ = ["DEFAULT_MAX_DEBOUNCE", "MAX_DEBOUNCE", "ON_PENDING", "check_pending"]

#: How long a debounced job may be pushed back after its creation, unless the dispatch says.
DEFAULT_MAX_DEBOUNCE = timedelta(minutes=10)
#: The longest ``max_debounce`` a dispatch may ask for.
MAX_DEBOUNCE = timedelta(days=30)
#: What an enqueue may do with a job pending under its key: return it, or replace its content.
ON_PENDING = ("keep", "replace")


def check_pending(
    pending_key: object, idempotency_key: object, on_pending: object, max_debounce: object
) -> None:
    """Raise :class:`~caravel.errors.ValidationError` naming the field when the pending options
    of a dispatch break a rule (the values are never echoed)."""
    if pending_key is None:
        field = "on_pending" if on_pending != "keep" else "max_debounce"
        raise ValidationError(field, "needs a pending_key")
    check_identifier(pending_key, "pending_key")
    if idempotency_key is not None:
        raise ValidationError(
            "pending_key", "cannot be combined with idempotency_key (one key per job)"
        )
    if on_pending not in ON_PENDING:
        raise ValidationError("on_pending", "must be 'keep' or 'replace'")
    check_duration(
        "max_debounce",
        max_debounce,
        timedelta(milliseconds=1),
        MAX_DEBOUNCE,
        "must be from 1 millisecond to 30 days",
    )
