"""``caravel worker``: run a continuous worker until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import signal
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from caravel.cli.apps import load_registry
from caravel.cli.logs import configure_logging
from caravel.cli.options import DatabaseUrl
from caravel.cli.render import console
from caravel.errors import CaravelError
from caravel.options import QueueOptions, WorkerOptions

if TYPE_CHECKING:
    from caravel.registry import JobRegistry

err = console(stderr=True)


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


def worker(
    url: DatabaseUrl,
    app: Annotated[
        str,
        typer.Option(
            "--app", help="Your job registry as module:attribute, e.g. myapp.jobs:registry."
        ),
    ],
    queue: Annotated[
        list[str], typer.Option("--queue", "-q", help="Queue to process; repeat for several.")
    ],
    concurrency: Annotated[
        int, typer.Option(help="Handlers running at once in this process (1-1024).")
    ] = 1,
    poll_interval: Annotated[
        float, typer.Option(help="Longest idle wait between looks at the queue, in seconds.")
    ] = 1.0,
    shutdown_grace: Annotated[
        float,
        typer.Option(help="Seconds in-flight jobs get to finish after SIGTERM/SIGINT."),
    ] = 30.0,
    lease_duration: Annotated[
        float, typer.Option(help="Lease length in seconds (1-3600).")
    ] = 300.0,
    lease_renewal_interval: Annotated[
        float | None,
        typer.Option(
            help="Renew leases this often while a handler runs (seconds; off by default)."
        ),
    ] = None,
    max_lease_lifetime: Annotated[
        float, typer.Option(help="Longest one claim may be renewed for, in seconds.")
    ] = 3600.0,
    heartbeat_interval: Annotated[
        float, typer.Option(help="Seconds between worker-registry heartbeats (1-300).")
    ] = 10.0,
    max_attempts: Annotated[
        int, typer.Option(help="Default attempts per job for jobs enqueued by this process.")
    ] = 3,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every job.")] = False,
    traceback: Annotated[
        bool,
        typer.Option(
            "--traceback",
            help="Development: log a failed handler's traceback (it may quote job data).",
        ),
    ] = False,
    durable_acks: Annotated[
        bool,
        typer.Option(
            "--durable-acks",
            help="Wait for the database's disk when recording each job's outcome (slower; "
            "off: an outcome lost in a database crash means the job runs again).",
        ),
    ] = False,
) -> None:
    """Run a worker for one or more queues until SIGTERM or SIGINT.

    The first signal stops claiming and gives in-flight jobs --shutdown-grace seconds to finish;
    a second signal cancels them at once (cancelled jobs run again after their leases expire).
    Exit code 0 after a normal shutdown; 1 when the database fails or is not migrated, so a
    service manager restarts it.
    """
    configure_logging(verbose)
    try:
        registry = load_registry(app)
        queue_options = QueueOptions(
            lease_duration=timedelta(seconds=lease_duration),
            lease_renewal_interval=_seconds(lease_renewal_interval),
            max_lease_lifetime=timedelta(seconds=max_lease_lifetime),
            max_attempts=max_attempts,
        )
        worker_options = WorkerOptions(
            concurrency=concurrency,
            poll_interval=timedelta(seconds=poll_interval),
            min_poll_interval=min(timedelta(milliseconds=50), timedelta(seconds=poll_interval)),
            shutdown_grace=timedelta(seconds=shutdown_grace),
            heartbeat_interval=timedelta(seconds=heartbeat_interval),
            log_tracebacks=traceback,
            durable_acks=durable_acks,
        )
    except CaravelError as exc:
        err.print(f"caravel worker: {exc}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    try:
        asyncio.run(_serve(url, registry, queue, queue_options, worker_options))
    except CaravelError as exc:
        err.print(f"caravel worker: stopped: {exc}", markup=False, highlight=False)
        raise typer.Exit(1) from None
    err.print("caravel worker: stopped", markup=False, highlight=False)


async def _serve(
    url: str,
    registry: JobRegistry,
    queues: list[str],
    queue_options: QueueOptions,
    worker_options: WorkerOptions,
) -> None:
    from caravel.queue import DatabaseQueue
    from caravel.worker import QueueWorker

    loop = asyncio.get_running_loop()
    async with (
        DatabaseQueue(url, registry, options=queue_options) as queue,
        QueueWorker(queue, options=worker_options) as running,
    ):
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, running.stop)
        err.print(
            f"caravel worker: processing {', '.join(queues)} "
            f"(concurrency {worker_options.concurrency}); SIGTERM or Ctrl+C stops",
            markup=False,
            highlight=False,
        )
        await running.run(queues)
