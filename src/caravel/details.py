"""Safe details: the one text about a failure that may be kept, and how it is made.

A failed attempt keeps its category and its exception's class, never the exception's message.
Beside them it may keep one short text for operators, only from one of two sources:

* the handler's own statement, a ``safe_detail`` given by name to :class:`~caravel.JobFailed`
  or :class:`~caravel.Discard`;
* else the worker's redactor (:attr:`WorkerOptions.redactor <caravel.WorkerOptions.redactor>`),
  a function of the application's that turns the exception into such a text, or into nothing.

Either way :func:`clean_detail` makes the text fit to keep: control and format characters out,
runs of white space made one space, cut to :data:`~caravel.limits.MAX_DETAIL_LENGTH`
characters. A redactor that raises or returns something else than a string or ``None`` gives no
detail and is reported in one log line that names the types involved, never a message.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Callable, Mapping

from caravel.directives import Discard, JobFailed
from caravel.limits import MAX_DETAIL_LENGTH

__all__ = ["ELLIPSIS", "Redactor", "clean_detail", "detail_of", "safe_detail_of"]

logger = logging.getLogger("caravel.worker")

#: What an application's redactor is: the exception an attempt failed with, to a text that is
#: safe to keep (or ``None``: nothing).
Redactor = Callable[[BaseException], "str | None"]

#: What ends a detail that was cut.
ELLIPSIS = "\u2026"

#: Unicode categories taken out: control (C0, DEL, C1), format (zero-width and bidirectional
#: marks among them, which would make a text read otherwise than it is) and lone surrogates
#: (which no database text column can hold).
_HIDDEN = frozenset(("Cc", "Cf", "Cs"))


def clean_detail(text: str) -> str | None:
    """``text`` made fit to keep, or ``None`` when nothing readable is left.

    White space of every kind (line breaks and tabs included) becomes one space between words,
    with none at either end; the other control and format characters and lone surrogates go;
    a text still longer than :data:`~caravel.limits.MAX_DETAIL_LENGTH` characters is cut to
    that length, its last character :data:`ELLIPSIS`. Reads no further into ``text`` than it
    needs, so a huge text costs no more than a short one.
    """
    kept: list[str] = []
    space = False
    for char in text:
        if char.isspace():
            space = bool(kept)
        elif unicodedata.category(char) not in _HIDDEN:
            if space:
                kept.append(" ")
                space = False
            kept.append(char)
            if len(kept) > MAX_DETAIL_LENGTH:
                # At least one more character than fits: cut, and say so.
                head = "".join(kept[: MAX_DETAIL_LENGTH - 1]).rstrip(" ")
                return head + ELLIPSIS
    return "".join(kept) or None


def safe_detail_of(exc: BaseException) -> str | None:
    """The cleaned detail ``exc`` carries because a handler marked it safe
    (:class:`~caravel.JobFailed`, :class:`~caravel.Discard`), or ``None``."""
    if isinstance(exc, JobFailed | Discard) and exc.safe_detail is not None:
        return clean_detail(exc.safe_detail)
    return None


def detail_of(
    exc: BaseException, redactor: Redactor | None, *, log_fields: Mapping[str, object]
) -> str | None:
    """The cleaned safe detail of an attempt that failed with ``exc``: the handler's
    ``safe_detail``, else what ``redactor`` makes of ``exc``, else ``None``.

    A redactor that raises, or returns neither a string nor ``None``, gives ``None``; a WARNING
    line says so with ``log_fields`` (the job's id, queue, type and attempt) and the type of
    what went wrong, never its text. Raises nothing."""
    marked = safe_detail_of(exc)
    if marked is not None or redactor is None:
        return marked
    try:
        made = redactor(exc)
    except Exception as error:  # the redactor's own failure; its message may quote exc's
        logger.warning(
            "redactor failed; the attempt keeps no detail",
            extra={**log_fields, "error_type": type(exc).__name__, "reason": type(error).__name__},
        )
        return None
    if made is None:
        return None
    if not isinstance(made, str):
        logger.warning(
            "redactor returned neither a string nor None; the attempt keeps no detail",
            extra={**log_fields, "error_type": type(exc).__name__, "reason": type(made).__name__},
        )
        return None
    return clean_detail(made)
