"""Log output for the command line: one line per record, with the structured fields the library
attaches (job id, queue, job type, attempt, category...) as ``key=value`` pairs."""

from __future__ import annotations

import logging

__all__ = ["configure_logging"]

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
)


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        pairs = [
            f"{name}={getattr(record, name)}"
            for name in FIELDS
            if getattr(record, name, None) is not None
        ]
        return f"{line} {' '.join(pairs)}" if pairs else line


def configure_logging(verbose: bool = False) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(KeyValueFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("caravel")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    root.propagate = False
