"""What the management commands share: finding the Caravel backend a command names, and
running Caravel's own command line for it (so ``manage.py caravel_worker`` has exactly the
flags, signals and exit codes of ``caravel worker``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

__all__ = ["caravel_backend", "run_caravel", "split_backend"]


def split_backend(argv: Sequence[str]) -> tuple[str, list[str]]:
    """``--backend ALIAS`` (default ``default``) and the arguments left for Caravel."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--backend", default="default")
    known, rest = parser.parse_known_args(list(argv))
    return str(known.backend), rest


def caravel_backend(alias: str) -> Any:
    """The backend ``TASKS[alias]``, which must be a ``CaravelBackend``."""
    from django.core.management.base import CommandError

    from caravel.contrib.django.backend import CaravelBackend
    from caravel.contrib.django.compat import task_backends

    try:
        backend = task_backends[alias]
    except Exception as exc:
        raise CommandError(f"TASKS has no backend {alias!r}") from exc
    if not isinstance(backend, CaravelBackend):
        raise CommandError(f"TASKS[{alias!r}] is not caravel.contrib.django.CaravelBackend")
    return backend


def run_caravel(name: str, args: list[str], prog_name: str) -> int:
    """Run ``caravel NAME ARGS`` (its usage and help under ``prog_name``); its exit code."""
    from caravel.cli.main import command

    try:
        command().commands[name].main(args=args, prog_name=prog_name, standalone_mode=True)
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
