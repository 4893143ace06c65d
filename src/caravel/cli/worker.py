"""``caravel worker``: run a continuous worker until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from caravel.cli.apps import load_attribute, load_registry
from caravel.cli.connect import process_url
from caravel.cli.failure import exit_code
from caravel.cli.flags import FlagError, flag_message, seconds
from caravel.cli.logs import configure_logging, parse_level
from caravel.cli.opening import explain
from caravel.cli.options import DatabaseUrl
from caravel.cli.prune import AGE_FLAGS, age, retention_from_flags
from caravel.cli.shutdown import abandoned_line, stopped_line, stopping_line
from caravel.errors import CaravelError, ValidationError
from caravel.options import QueueOptions, WorkerOptions

if TYPE_CHECKING:
    from caravel.registry import JobRegistry
    from caravel.worker import QueueWorker


T = TypeVar("T")

#: The flag behind each option field, for errors in the words the operator typed.
FLAGS = {
    "concurrency": "--concurrency",
    "poll_interval": "--poll-interval",
    "min_poll_interval": "--poll-interval",
    "poll_intervals": "--poll-interval",
    "shutdown_grace": "--shutdown-grace",
    "outage_window": "--outage-window",
    "heartbeat_interval": "--heartbeat-interval",
    "summary_interval": "--summary-interval",
    "lease_duration": "--lease-duration",
    "lease_renewal_interval": "--lease-renewal-interval",
    "max_lease_lifetime": "--max-lease-lifetime",
    **AGE_FLAGS,
    "prune_interval": "--prune-interval",
    "redactor": "--redactor",
}


def poll_flags(values: list[str]) -> tuple[timedelta, dict[str, timedelta]]:
    """``--poll-interval`` as given: the worker's interval (plain seconds, 1 s when none is)
    and each queue's own (``QUEUE=SECONDS``)."""
    poll = timedelta(seconds=1)
    per_queue: dict[str, timedelta] = {}
    for value in values:
        queue, assigned, amount = value.rpartition("=")
        try:
            number = float(amount)
        except ValueError:
            raise FlagError(
                "--poll-interval must be a number of seconds, or QUEUE=SECONDS"
            ) from None
        if assigned and not queue:
            raise FlagError("--poll-interval must name a queue before =")
        if assigned:
            per_queue[queue] = seconds("--poll-interval", number)
        else:
            poll = seconds("--poll-interval", number)
    return poll, per_queue


def worker(
    url: DatabaseUrl,
    app: Annotated[
        str,
        typer.Option(
            "--app", help="Your job registry as module:attribute, e.g. myapp.jobs:registry."
        ),
    ],
    queue: Annotated[
        list[str] | None,
        typer.Option(
            "--queue",
            "-q",
            help="Queue to process; repeat for several. Left out: the queues the registry "
            "names (JobRegistry(queues=...) and its schedules' queues).",
        ),
    ] = None,
    concurrency: Annotated[
        int, typer.Option(help="Handlers running at once in this process (1-1024).")
    ] = 1,
    poll_interval: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SECONDS|QUEUE=SECONDS",
            help="Longest idle wait between looks at the queue, in seconds (default 1); "
            "QUEUE=SECONDS sets one queue's own. Repeat for several.",
        ),
    ] = None,
    polling_only: Annotated[
        bool,
        typer.Option(
            "--polling-only",
            help="Never LISTEN: poll each queue at its interval. For a database behind a "
            "pooler in transaction mode (PgBouncer).",
        ),
    ] = False,
    shutdown_grace: Annotated[
        float,
        typer.Option(help="Seconds in-flight jobs get to finish after SIGTERM/SIGINT."),
    ] = 30.0,
    outage_window: Annotated[
        float,
        typer.Option(
            help="Seconds the worker keeps retrying while its database is unreachable (a "
            "failover, a restart) before it exits 1 (0-3600; 0 exits at the first failure)."
        ),
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
    summary_interval: Annotated[
        float,
        typer.Option(
            help="Seconds between the summaries of finished jobs logged at info (1-3600; 0 "
            "turns them off)."
        ),
    ] = 10.0,
    max_attempts: Annotated[
        int | None,
        typer.Option(
            hidden=True, metavar="N", help="Gone: refused, naming where the budget is set."
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log every job (the same as --log-level debug).")
    ] = False,
    log_level: Annotated[
        str | None,
        typer.Option(
            "--log-level",
            metavar="LEVEL",
            help="debug, info (the default), warning or error.",
        ),
    ] = None,
    traceback: Annotated[
        bool,
        typer.Option(
            "--traceback",
            help="Development: log a failed handler's traceback (it may quote job data).",
        ),
    ] = False,
    redactor: Annotated[
        str | None,
        typer.Option(
            "--redactor",
            metavar="MODULE:FUNCTION",
            help="Your function turning a failed attempt's exception into a text safe to keep "
            "for operators, or None (WorkerOptions.redactor), e.g. myapp.jobs:redact.",
        ),
    ] = None,
    durable_acks: Annotated[
        bool,
        typer.Option(
            "--durable-acks",
            help="Wait for the database's disk when recording each job's outcome (slower; "
            "off: an outcome lost in a database crash means the job runs again).",
        ),
    ] = False,
    no_schedules: Annotated[
        bool,
        typer.Option(
            "--no-schedules",
            help="Do not enqueue the registry's schedules' slots here (other workers may).",
        ),
    ] = False,
    completed: Annotated[
        str | None,
        typer.Option(
            metavar="AGE",
            help="Prune completed jobs finished this long ago (7d, 12h, 30m), every "
            "--prune-interval; with no age given, this worker prunes nothing.",
        ),
    ] = None,
    cancelled: Annotated[
        str | None, typer.Option(metavar="AGE", help="Prune cancelled jobs this old.")
    ] = None,
    dead_letter: Annotated[
        str | None,
        typer.Option(
            "--dead-letter", metavar="AGE", help="Prune dead letters this old (keep long)."
        ),
    ] = None,
    keys: Annotated[
        str | None,
        typer.Option(
            metavar="AGE",
            help="Delete tombstones pruned this long ago; their keys' duplicate protection ends.",
        ),
    ] = None,
    prune_interval: Annotated[
        str | None,
        typer.Option(
            "--prune-interval",
            metavar="AGE",
            help="How often to prune, from 1m to 1d (default 1h); needs an age above.",
        ),
    ] = None,
    event_loop: Annotated[
        str,
        typer.Option(
            "--loop",
            metavar="asyncio|uvloop",
            help="The event loop: Python's own, or uvloop (pip install 'caravel-queue[uvloop]').",
        ),
    ] = "asyncio",
) -> None:
    """Run a worker for one or more queues until SIGTERM or SIGINT.

    Without --queue it serves the queues the registry names. The first signal stops claiming
    and gives in-flight jobs --shutdown-grace seconds to finish; a second signal cancels them
    at once (cancelled jobs run again after their leases expire).
    Exit code 0 after a normal shutdown; 2 for invalid options, a bad --app, a SQLite file that
    does not exist or a queue that is not migrated; 1 when the database fails while it runs (or
    stays unreachable for longer than --outage-window), so a service manager restarts it.
    """
    try:
        if max_attempts is not None:
            raise FlagError(
                "--max-attempts is gone: a job's attempt budget is fixed when it is enqueued "
                "(QueueOptions.max_attempts or DispatchOptions.max_attempts); a worker cannot "
                "change it"
            )
        configure_logging(level=parse_level(log_level, verbose))
        poll, per_queue = poll_flags(poll_interval or [])
        renewal = lease_renewal_interval
        queue_options = QueueOptions(
            lease_duration=seconds("--lease-duration", lease_duration),
            lease_renewal_interval=(
                None if renewal is None else seconds("--lease-renewal-interval", renewal)
            ),
            max_lease_lifetime=seconds("--max-lease-lifetime", max_lease_lifetime),
        )
        retention = retention_from_flags(completed, cancelled, dead_letter, keys)
        interval = age("--prune-interval", prune_interval)
        if interval is not None and retention is None:
            raise FlagError(
                "--prune-interval needs an age to prune by: --completed, --cancelled, "
                "--dead-letter or --keys"
            )
        # Left out, the library's default interval holds.
        pruning: dict[str, Any] = {} if interval is None else {"prune_interval": interval}
        worker_options = WorkerOptions(
            concurrency=concurrency,
            poll_interval=poll,
            min_poll_interval=min(timedelta(milliseconds=50), poll),
            polling_only=polling_only,
            poll_intervals=per_queue,
            shutdown_grace=seconds("--shutdown-grace", shutdown_grace),
            outage_window=seconds("--outage-window", outage_window),
            heartbeat_interval=seconds("--heartbeat-interval", heartbeat_interval),
            summary_interval=(
                None if summary_interval == 0 else seconds("--summary-interval", summary_interval)
            ),
            log_tracebacks=traceback,
            redactor=None if redactor is None else load_attribute(redactor, "redactor", "function"),
            durable_acks=durable_acks,
            retention=retention,
            schedules=not no_schedules,
            **pruning,
        )
        run = event_loop_runner(event_loop)
        registry = load_registry(app)
        queues = served_queues(app, registry, queue)
    except ValueError as exc:  # FlagError, and ValidationError with its field as a flag
        shown = flag_message(exc, FLAGS) if isinstance(exc, ValidationError) else str(exc)
        _say(shown)
        raise typer.Exit(2) from None
    except CaravelError as exc:
        _say(str(exc))
        raise typer.Exit(2) from None
    try:
        worker_ran = run(
            _serve(url, registry, queues, queue_options, worker_options, named=bool(queue))
        )
    except KeyboardInterrupt:  # Ctrl+C before the worker took over the signals
        _say("interrupted before it started; stopped")
        raise typer.Exit(130) from None
    except FailedWhileRunning as failed:
        _say(f"stopped: {failed.cause}")
        raise typer.Exit(1) from None
    except CaravelError as exc:  # before it ran: 2 for a missing file or an unmigrated queue
        _say(explain(exc, url) or f"stopped: {exc}")
        raise typer.Exit(exit_code(exc)) from None
    finally:
        # From here on the worker is done: a late Ctrl+C must not end in a traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    _say(stopped_line(worker_ran))


def served_queues(app: str, registry: JobRegistry, named: list[str] | None) -> list[str]:
    """The queues typed with ``--queue``, or else the ones the registry names; a
    :class:`FlagError` saying what to do when neither names any."""
    if named:
        return named
    if registry.queues:
        return list(registry.queues)
    raise FlagError(
        f"--queue is required: {app} names no queues (it declares none with "
        "JobRegistry(queues=[...]) and has no schedules); give --queue NAME for each queue "
        "to serve"
    )


def event_loop_runner(name: str) -> Callable[[Coroutine[Any, Any, T]], T]:
    """``asyncio.run`` or ``uvloop.run``, by the ``--loop`` the operator chose."""
    if name == "asyncio":
        return asyncio.run
    if name != "uvloop":
        raise FlagError(f"--loop must be asyncio or uvloop, not {name!r}")
    try:
        import uvloop
    except ImportError:
        raise FlagError(
            "--loop uvloop needs the uvloop package: pip install 'caravel-queue[uvloop]'"
        ) from None
    runner: Callable[[Coroutine[Any, Any, T]], T] = uvloop.run
    return runner


def _say(message: str) -> None:
    typer.echo(f"caravel worker: {message}", err=True)


class FailedWhileRunning(Exception):
    """The database failed after the worker had started: a runtime failure, exit 1."""

    def __init__(self, cause: CaravelError) -> None:
        super().__init__(str(cause))
        self.cause = cause


async def _serve(
    url: str,
    registry: JobRegistry,
    queues: list[str],
    queue_options: QueueOptions,
    worker_options: WorkerOptions,
    *,
    named: bool,
) -> QueueWorker:
    from caravel.queue import DatabaseQueue
    from caravel.worker import QueueWorker

    loop = asyncio.get_running_loop()
    async with DatabaseQueue(process_url(url), registry, options=queue_options) as queue:
        # Before "processing": what is wrong here is the set-up's (exit 2); what fails after it
        # is a runtime failure (exit 1), a database file removed while it runs included.
        await queue.check_schema()
        async with QueueWorker(queue, options=worker_options) as running:

            def on_signal() -> None:
                _say(stopping_line(running.stop()))

            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, on_signal)
            # Everything loaded so far (the libraries, the application's modules) lives as long
            # as the process: set it aside, so the collector's full passes, which the jobs in
            # flight set off again and again, stop walking it every time. The command line keeps
            # the collector off until here (caravel.cli.main): a pass over start-up's objects
            # finds next to nothing (a few hundred) and costs tens of milliseconds.
            gc.freeze()
            gc.enable()
            pruning = ""
            if worker_options.retention is not None:
                minutes = int(worker_options.prune_interval.total_seconds() // 60)
                pruning = f"; prunes finished jobs every {minutes} min"
            source = "" if named else "the registry's queues; "
            _say(
                f"processing {', '.join(queues)} "
                f"({source}concurrency {worker_options.concurrency}){pruning}; "
                "SIGTERM or Ctrl+C stops"
            )
            try:
                await running.run(queues)
            except CaravelError as exc:
                raise FailedWhileRunning(exc) from exc
            finally:
                if running.abandoned_at_stop:
                    _say(abandoned_line(running.abandoned_at_stop, datetime.now(UTC)))
    return running
