"""``caravel metrics``: the autoscaling signal (:mod:`caravel.autoscaling`), printed once or
served at ``/metrics`` for an autoscaler or a scraper."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from typing import Annotated, Literal

import typer

from caravel.autoscaling import ScalingSignal, prometheus_text, signal_document
from caravel.cli.connect import open_inspector
from caravel.cli.failure import exit_code, fail
from caravel.cli.jsonout import emit
from caravel.cli.opening import explain
from caravel.cli.options import DatabaseUrl
from caravel.errors import CaravelError, ValidationError
from caravel.validation import check_int, check_queue_name

__all__ = ["metrics"]

Format = Literal["json", "prometheus"]


async def read_signal(
    url: str, queue: str | None, keys: int, lost_after: timedelta
) -> ScalingSignal:
    """The signal, through a read-only connection."""
    async with open_inspector(url) as reader:
        return await reader.scaling_signal(queue, lost_after=lost_after, keys=keys)


def metrics(
    url: DatabaseUrl,
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue", "-q", metavar="NAME", help="Only this queue (listed even when idle)."
        ),
    ] = None,
    output: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="json (one object on one line) or prometheus (the text format).",
        ),
    ] = "json",
    keys: Annotated[
        int,
        typer.Option(
            metavar="N",
            help="The busiest partition keys shown per queue with a per-key limit (0-1000).",
        ),
    ] = 20,
    lost_after: Annotated[
        float,
        typer.Option(
            metavar="SECONDS",
            help="Seconds without a heartbeat before a worker is no longer counted.",
        ),
    ] = 60.0,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="Serve the signal at http://HOST:PORT/metrics until stopped, instead of "
            "printing it once.",
        ),
    ] = False,
    bind: Annotated[
        str,
        typer.Option(
            metavar="HOST:PORT",
            help="With --serve: address and port to listen on ([::1]:port for IPv6).",
        ),
    ] = "127.0.0.1:9464",
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote",
            help="With --serve: allow listening on an address other machines can reach. "
            "Without --authorize their requests are refused anyway.",
        ),
    ] = False,
    authorize: Annotated[
        str | None,
        typer.Option(
            metavar="MODULE:FUNCTION",
            help="With --serve: the function deciding who may read (as the dashboard's). "
            "Without it only requests from this machine are answered.",
        ),
    ] = None,
    max_age: Annotated[
        float,
        typer.Option(
            metavar="SECONDS",
            help="With --serve: answer from a signal read at most this long ago (0-300; 0 "
            "reads for every request). Requests during a read share it.",
        ),
    ] = 1.0,
) -> None:
    """Print or serve the autoscaling signal.

    Per queue: jobs due now, jobs running, how long the oldest due job has waited, jobs
    finished in the last minute and the workers serving it; for a queue with a concurrency
    limit, its busiest partition keys. Opens the database read-only and never changes
    anything.
    """
    try:
        if queue is not None:
            check_queue_name(queue)
        if output not in ("json", "prometheus"):
            raise ValidationError("--format", "must be json or prometheus")
        check_int("--keys", keys, 0, 1000)
        if not lost_after > 0:
            raise ValidationError("--lost-after", "must be positive")
        if not 0 <= max_age <= 300:
            raise ValidationError("--max-age", "must be from 0 to 300 seconds")
    except ValidationError as exc:
        # Errors are JSON unless text was asked for: what reads the output reads them too.
        raise fail("metrics", exc, as_json=output != "prometheus") from None
    if serve:
        ages = (timedelta(seconds=lost_after), timedelta(seconds=max_age))
        _serve(url, bind, allow_remote, authorize, *ages)
        return
    try:
        signal = asyncio.run(read_signal(url, queue, keys, timedelta(seconds=lost_after)))
    except CaravelError as exc:
        raise fail("metrics", exc, as_json=output == "json", url=url) from None
    if output == "json":
        emit(signal_document(signal))
    else:
        sys.stdout.write(prometheus_text(signal))


def _serve(
    url: str,
    bind: str,
    allow_remote: bool,
    authorize: str | None,
    lost_after: timedelta,
    max_age: timedelta,
) -> None:
    from caravel.cli.dashboard import checked_bind, load_authorize, serve

    host, port = checked_bind("metrics", bind, allow_remote)
    try:
        from caravel.web import metrics_app
    except ImportError:
        typer.echo(
            "caravel metrics: the web extra is not installed; "
            "run: pip install 'caravel-queue[web]'",
            err=True,
        )
        raise typer.Exit(2) from None
    check = load_authorize("metrics", authorize)

    async def schema_ready() -> None:
        async with open_inspector(url) as reader:
            await reader.check_schema()

    try:
        asyncio.run(schema_ready())
        app = metrics_app(url, authorize=check, lost_after=lost_after, max_age=max_age)
    except CaravelError as exc:  # 2 for a missing file or an unmigrated queue, 1 otherwise
        typer.echo(f"caravel metrics: {explain(exc, url) or exc}", err=True)
        raise typer.Exit(exit_code(exc)) from None
    who = "requests decided by " + authorize if authorize else "requests from this machine only"
    serve("metrics", app, host, port, f"/metrics ({who})")
