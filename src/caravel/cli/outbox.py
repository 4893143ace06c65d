"""``caravel outbox``: run the relay that delivers outbox intents to the queue."""

from __future__ import annotations

import asyncio
import signal
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from caravel.cli.apps import load_registry
from caravel.cli.connect import process_url
from caravel.cli.failure import fail
from caravel.cli.flags import FlagError, flag_message, seconds
from caravel.cli.jsonout import emit
from caravel.cli.logs import configure_logging, parse_level
from caravel.cli.options import DatabaseUrl
from caravel.errors import CaravelError, OptionsError, StoreError
from caravel.outbox import OUTBOX_TABLE

if TYPE_CHECKING:
    from caravel.registry import JobRegistry

app = typer.Typer(
    help="Deliver transactional-outbox intents to the queue.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

#: The flag behind each relay option field, for errors in the words the operator typed.
FLAGS = {"batch_size": "--batch-size", "poll_interval": "--poll-interval"}


@app.command()
def relay(
    url: DatabaseUrl,
    app_url: Annotated[
        str,
        typer.Option(
            "--app-url",
            envvar="CARAVEL_APP_DATABASE_URL",
            show_envvar=True,
            metavar="URL",
            help="The application database holding the outbox table.",
        ),
    ],
    registry_path: Annotated[
        str,
        typer.Option(
            "--app",
            metavar="MODULE:ATTRIBUTE",
            help="Your job registry, e.g. myapp.jobs:registry.",
        ),
    ],
    table: Annotated[str, typer.Option(metavar="NAME", help="Outbox table name.")] = OUTBOX_TABLE,
    batch_size: Annotated[int, typer.Option(metavar="N", help="Intents per pass (1-1000).")] = 100,
    poll_interval: Annotated[
        float,
        typer.Option(metavar="SECONDS", help="Seconds between passes that found nothing more."),
    ] = 1.0,
    once: Annotated[bool, typer.Option("--once", help="Run one pass and exit.")] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="With --once: print what the pass dispatched as one JSON object on stdout; "
            "errors as JSON on stderr.",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Log every intent (the same as --log-level debug)."),
    ] = False,
    log_level: Annotated[
        str | None,
        typer.Option(
            "--log-level", metavar="LEVEL", help="debug, info (the default), warning or error."
        ),
    ] = None,
) -> None:
    """Relay committed outbox intents into the queue.

    Runs until SIGTERM or SIGINT, or for one pass with --once. Exit code 0 after a normal
    shutdown; 2 when --app does not name a job registry, a SQLite file does not exist or the
    queue is not migrated; 1 when either database fails, so a supervisor restarts it
    (undispatched intents are sent again, and resolve to the same jobs).
    """
    try:
        if as_json and not once:
            raise FlagError("--json needs --once: a running relay reports in log lines")
        configure_logging(level=parse_level(log_level, verbose))
        seconds("--poll-interval", poll_interval)
        registry = load_registry(registry_path)
    except (FlagError, CaravelError) as exc:
        raise fail("outbox relay", exc, as_json=as_json) from None
    try:
        sent = asyncio.run(_serve(url, app_url, registry, table, batch_size, poll_interval, once))
    except OptionsError as exc:  # a number out of its range, said with the flag
        said = FlagError(flag_message(exc, FLAGS))
        raise fail("outbox relay", said, as_json=as_json) from None
    except CaravelError as exc:
        # The outbox's own operations run on the application's database; the rest on the queue's.
        on_app = isinstance(exc, StoreError) and exc.operation.startswith("outbox_")
        raise fail(
            "outbox relay: stopped",
            exc,
            as_json=as_json,
            url=app_url if on_app else url,
            database="application" if on_app else "queue",
        ) from None
    if once and as_json:
        emit({"dispatched": sent})
    elif once:
        typer.echo(f"caravel outbox relay: dispatched {sent}", err=True)


async def _serve(
    url: str,
    app_url: str,
    registry: JobRegistry,
    table: str,
    batch_size: int,
    poll_interval: float,
    once: bool,
) -> int:
    """Relay until stopped, or one pass with ``once``; how many intents that pass dispatched
    (0 after a continuous run)."""
    from caravel.outbox.relay import OutboxRelay
    from caravel.queue import DatabaseQueue

    async with DatabaseQueue(process_url(url), registry) as queue:
        # Built before the schema check, so a number out of range is said before any database
        # is read.
        relay = OutboxRelay(
            app_url,
            queue,
            table_name=table,
            batch_size=batch_size,
            poll_interval=timedelta(seconds=poll_interval),
        )
        try:
            await queue.check_schema()
            if once:
                return await relay.run_once()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, relay.stop)
            typer.echo("caravel outbox relay: running; SIGTERM or Ctrl+C stops", err=True)
            await relay.run()
            return 0
        finally:
            await relay.close()
