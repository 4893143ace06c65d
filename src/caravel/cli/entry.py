"""The ``caravel`` console script. A Ctrl+C that comes before a command has taken over the
signals (while its modules are still being imported, say) ends in one line and exit 130, the
shell's code for an interrupt, never in a traceback."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    try:
        from caravel.cli.main import main as run

        run()
    except KeyboardInterrupt:
        sys.stderr.write("caravel: interrupted\n")
        sys.exit(130)
