"""``manage.py caravel_status [--backend ALIAS] [--queue NAME] [--json]``: the job counts of a
backend's queue database per queue and state, as ``caravel status`` shows them."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand

from caravel.contrib.django.commands import caravel_backend, run_caravel

PROG = "manage.py caravel_status"


class Command(BaseCommand):
    help = "Show a TASKS backend's job counts per queue and state, as caravel status does."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--backend", default="default", help="The TASKS alias.")
        parser.add_argument("--queue", "-q", metavar="NAME", help="Only this queue.")
        parser.add_argument("--json", action="store_true", help="One JSON document.")

    def handle(self, *args: Any, **options: Any) -> None:
        backend = caravel_backend(options["backend"])
        argv = ["--url", backend.config.queue_url()]
        if options["queue"] is not None:
            argv += ["--queue", options["queue"]]
        if options["json"]:
            argv.append("--json")
        code = run_caravel("status", argv, PROG)
        if code:
            sys.exit(code)
