"""``manage.py caravel_status [--backend ALIAS] [--queue NAME] [--json]``: the job counts of a
backend's queue database per queue and state, as ``caravel status`` shows them."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand

from caravel.contrib.django.commands import caravel_backend, run_caravel, split_backend

PROG = "manage.py caravel_status"


class Command(BaseCommand):
    help = "Show a TASKS backend's job counts per queue and state (caravel status's options)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--backend", default="default", help="The TASKS alias.")
        parser.add_argument("status_args", nargs="*", help="Options of caravel status.")

    def run_from_argv(self, argv: list[str]) -> None:
        alias, rest = split_backend(argv[2:])
        sys.exit(self.run(alias, rest))

    def handle(self, *args: Any, **options: Any) -> None:
        code = self.run(options["backend"], list(options["status_args"]))
        if code:
            sys.exit(code)

    def run(self, alias: str, rest: list[str]) -> int:
        backend = caravel_backend(alias)
        return run_caravel(["status", "--url", backend.config.queue_url(), *rest], PROG)
