"""``manage.py caravel_worker [--backend ALIAS] [caravel worker options]``: a Caravel worker
running the tasks of one backend until SIGTERM or SIGINT.

Every option of ``caravel worker`` is accepted (``--concurrency``, ``--shutdown-grace``, ...,
``caravel worker --help`` lists them); ``--url`` and ``--app`` come from the backend, and the
queues from its ``QUEUES`` unless ``--queue`` is given."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand

from caravel.contrib.django import worker_app
from caravel.contrib.django.commands import caravel_backend, run_caravel, split_backend

PROG = "manage.py caravel_worker"


class Command(BaseCommand):
    help = "Run a Caravel worker for the tasks of a TASKS backend (caravel worker's options)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--backend", default="default", help="The TASKS alias.")
        parser.add_argument("worker_args", nargs="*", help="Options of caravel worker.")

    def run_from_argv(self, argv: list[str]) -> None:
        # Caravel's own parser reads the worker's options; Django's would refuse them.
        alias, rest = split_backend(argv[2:])
        sys.exit(self.run(alias, rest))

    def handle(self, *args: Any, **options: Any) -> None:
        code = self.run(options["backend"], list(options["worker_args"]))
        if code:
            sys.exit(code)

    def run(self, alias: str, rest: list[str]) -> int:
        backend = caravel_backend(alias)
        worker_app.registry = backend.catalog.registry
        args = ["--url", backend.config.queue_url()]
        args += ["--app", "caravel.contrib.django.worker_app:registry"]
        if not {"--queue", "-q"} & set(rest):
            for name in sorted(backend.queues):
                args += ["--queue", name]
        if backend.config.log_tracebacks and "--traceback" not in rest:
            args.append("--traceback")
        return run_caravel("worker", args + rest, PROG)
