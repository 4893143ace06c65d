"""Log output for the command line: one line per record, with the structured fields the library
attaches (job id, queue, job type, attempt, category...) as ``key=value`` pairs."""

from __future__ import annotations

import json
import logging

from caravel.cli.flags import FlagError

__all__ = ["LEVELS", "configure_logging", "parse_level"]

#: What ``--log-level`` accepts; ``--verbose`` is ``debug``.
LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

FIELDS = (
    "job_id",
    "outbox_id",
    "queue",
    "job_type",
    "attempt",
    "category",
    "dead_lettered",
    "reason",
    "error_type",
    "operation",
    "detail",
    "source",
    "retry_in_seconds",
)


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        pairs = [
            f"{name}={_value(getattr(record, name))}"
            for name in FIELDS
            if getattr(record, name, None) is not None
        ]
        return f"{line} {' '.join(pairs)}" if pairs else line


def _value(value: object) -> str:
    """A field's value as one word: in double quotes, JSON-escaped, when it has spaces or
    quotes (a failure's detail) or is empty, so every pair still reads as ``key=value``."""
    text = str(value)
    if not text or '"' in text or any(char.isspace() for char in text):
        return json.dumps(text, ensure_ascii=False)
    return text


def parse_level(level: str | None, verbose: bool) -> int:
    """The level ``--log-level`` and ``--verbose`` ask for (info when neither is given).
    Raises :class:`~caravel.cli.flags.FlagError` naming the flag for a word it does not know,
    or when the two disagree."""
    if level is None:
        return logging.DEBUG if verbose else logging.INFO
    chosen = LEVELS.get(level.lower())
    if chosen is None:
        raise FlagError("--log-level must be one of " + ", ".join(LEVELS))
    if verbose and chosen != logging.DEBUG:
        raise FlagError(f"--verbose means --log-level debug; give one or the other, not {level}")
    return chosen


def configure_logging(verbose: bool = False, level: int | None = None) -> None:
    """One handler on the ``caravel`` logger: ``level`` when given, else debug with
    ``verbose`` and info without."""
    handler = logging.StreamHandler()
    handler.setFormatter(KeyValueFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("caravel")
    root.handlers[:] = [handler]
    root.setLevel(level if level is not None else logging.DEBUG if verbose else logging.INFO)
    root.propagate = False
