"""Job tags: the rule a tag follows and the form the ``tags`` column stores.

A job's tags are stored as one text, ``,billing,customer:42,``: every tag between commas, so a
listing filters on one tag with an exact ``LIKE '%,tag,%'`` and no tag can match inside another.
The character rule keeps commas out (and the filter escapes the LIKE wildcard ``_``). Tags are
labels for operators, never payload: they are shown in listings and on the dashboard, so they
must never carry secrets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from caravel.errors import ValidationError
from caravel.limits import MAX_TAG_LENGTH, MAX_TAGS

__all__ = ["MAX_TAGS", "MAX_TAG_LENGTH", "check_tag", "check_tags", "stored_tags", "tags_from"]

_TAG = re.compile(rf"[a-z0-9:._-]{{1,{MAX_TAG_LENGTH}}}")
_TAG_RULE = (
    f"must be 1 to {MAX_TAG_LENGTH} characters of lowercase letters, digits, ':', '.', '-' or '_'"
)


def check_tag(value: object, field: str = "tag") -> str:
    """One tag (or a tag to filter by): 1 to 64 characters of ``[a-z0-9:._-]``."""
    if not isinstance(value, str):
        raise ValidationError(field, "must be a string")
    if _TAG.fullmatch(value) is None:
        raise ValidationError(field, _TAG_RULE)
    return value


def check_tags(value: object, field: str = "tags") -> tuple[str, ...]:
    """A job's tags: a tuple or list of at most 16 distinct tags, each as :func:`check_tag`
    says. A repeated tag is dropped (tags are a set; the first place it appears is kept), and
    a single string is refused rather than read as a sequence of one-letter tags."""
    if isinstance(value, str) or not isinstance(value, tuple | list):
        raise ValidationError(field, "must be a tuple or list of strings")
    for tag in value:
        if not isinstance(tag, str) or _TAG.fullmatch(tag) is None:
            raise ValidationError(field, "each tag " + _TAG_RULE)
    distinct = tuple(dict.fromkeys(value))
    if len(distinct) > MAX_TAGS:
        raise ValidationError(field, f"must hold at most {MAX_TAGS} distinct tags")
    return distinct


def stored_tags(tags: Iterable[str]) -> str | None:
    """The ``tags`` column's text for checked ``tags``: ``,a,b,``, or ``None`` for none."""
    joined = ",".join(tags)
    return f",{joined}," if joined else None


def tags_from(stored: str | None) -> tuple[str, ...]:
    """The tags a ``tags`` column holds, in the order they were given."""
    if not stored:
        return ()
    return tuple(tag for tag in stored.split(",") if tag)
