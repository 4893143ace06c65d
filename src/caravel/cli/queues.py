"""``caravel queues``: list the queues with whether each is paused, pause or resume one, and
show or change their concurrency and rate limits (``caravel queues limits``).

A pause is an operator action for every worker on every host: workers stop claiming the queue's
jobs (at once on PostgreSQL, within their poll interval on SQLite), jobs already running finish,
and enqueues still succeed. Pausing a paused queue or resuming a running one changes nothing and
says so; both still exit 0, since the queue is then as asked.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Annotated, Any

import typer

from caravel.cli.connect import open_inspector, open_writer
from caravel.cli.failure import fail
from caravel.cli.jsonout import emit, timestamp
from caravel.cli.options import DatabaseUrl, Json
from caravel.clock import from_ms
from caravel.errors import CaravelError, ValidationError
from caravel.store.protocol import QueueLimit, QueueLimitUsage
from caravel.validation import check_queue_name

app = typer.Typer(
    help="List queues, pause or resume one, and show or change their limits.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

QueueName = Annotated[str, typer.Argument(help="The queue's name.")]


async def read_queues(url: str) -> list[tuple[str, datetime | None]]:
    """Every queue that has jobs or is paused, by name, with when it was paused (or None)."""
    async with open_inspector(url) as reader:
        counted = await reader.queue_counts()
        paused = {p.queue: p.paused_at for p in await reader.paused_queues()}
    names = sorted({c.queue for c in counted} | set(paused))
    return [(name, paused.get(name)) for name in names]


@app.command("list")
def list_queues(url: DatabaseUrl, as_json: Json = False) -> None:
    """List the queues that have jobs or are paused, and whether each is paused.

    Read-only: the database is opened as for ``caravel status``.
    """
    try:
        found = asyncio.run(read_queues(url))
    except CaravelError as exc:
        raise fail("queues list", exc, as_json=as_json, url=url) from None
    if as_json:
        emit(
            {
                "queues": [
                    {"queue": name, "paused": at is not None, "paused_at": at} for name, at in found
                ]
            }
        )
        return
    if not found:
        typer.echo("no queues")
        return
    from rich.table import Table
    from rich.text import Text

    from caravel.cli.render import console

    table = Table(title="Queues")
    for column in ("queue", "state", "paused since (UTC)"):
        table.add_column(column)
    for name, at in found:
        since = "" if at is None else timestamp(at)
        table.add_row(Text(name), "paused" if at is not None else "running", since)
    console().print(table)


def _change(command: str, url: str, queue: str, as_json: bool, *, pause: bool) -> None:
    async def go() -> bool:
        async with open_writer(url) as q:
            return await (q.pause_queue(queue) if pause else q.resume_queue(queue))

    try:
        check_queue_name(queue)
        changed = asyncio.run(go())
    except CaravelError as exc:
        raise fail(command, exc, as_json=as_json, url=url) from None
    if as_json:
        fields: dict[str, Any] = {"queue": queue, "paused": pause, "changed": changed}
        emit(fields)
    elif pause:
        typer.echo(f"paused {queue}" if changed else f"{queue} was already paused")
    else:
        typer.echo(f"resumed {queue}" if changed else f"{queue} was not paused")


@app.command()
def pause(queue: QueueName, url: DatabaseUrl, as_json: Json = False) -> None:
    """Pause a queue for every worker.

    Workers claim none of its jobs until it is resumed; jobs already running finish, and
    enqueues still add jobs (they wait). Exit 0 also when it was paused already.
    """
    _change("queues pause", url, queue, as_json, pause=True)


@app.command()
def resume(queue: QueueName, url: DatabaseUrl, as_json: Json = False) -> None:
    """Resume a paused queue: workers claim its jobs again.

    Exit 0 also when it was not paused.
    """
    _change("queues resume", url, queue, as_json, pause=False)


# ----- concurrency and rate limits ----------------------------------------------------------

limits_app = typer.Typer(
    help="Show and change queues' concurrency and rate limits.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(limits_app, name="limits")


def _caps(limit: QueueLimit) -> dict[str, Any]:
    """A queue's stored caps, as ``queues limits set`` and ``show`` print them."""
    return {
        "queue": limit.queue,
        "concurrency": limit.concurrency,
        "per_key": limit.per_key,
        "rate": limit.rate,
        "rate_per_key": limit.rate_per_key,
        "period_ms": limit.rate_period_ms,
        "fair": limit.fair,
        "weights": dict(limit.weights),
    }


def _limit_fields(usage: QueueLimitUsage) -> dict[str, Any]:
    limit = usage.limit
    return {
        **_caps(limit),
        "updated_at": from_ms(limit.updated_at),
        "running": usage.running,
        "waiting": usage.waiting,
        "rate_used": usage.rate_used,
        "keys": [{"key": k.key, "running": k.running, "waiting": k.waiting} for k in usage.keys],
    }


def _weights(given: list[str] | None) -> dict[str, object]:
    """``--weight KEY=N`` options as a mapping (checked by :class:`ConcurrencyLimit`); a value
    not of that form is :class:`ValidationError` naming ``weights``."""
    weights: dict[str, object] = {}
    for item in given or []:
        key, sep, number = item.rpartition("=")
        if not sep or not number.strip().isdigit():
            raise ValidationError("weights", "each --weight must be KEY=N, N a positive integer")
        if key in weights:
            raise ValidationError("weights", "name each partition key once")
        weights[key] = int(number)
    return weights


@limits_app.command("show")
def show_limits(
    url: DatabaseUrl,
    keys: Annotated[
        int,
        typer.Option(
            "--keys",
            metavar="N",
            help="Show at most N partition keys per queue, the most running first (0-1000).",
        ),
    ] = 20,
    as_json: Json = False,
) -> None:
    """List the queues with limits: at most CONCURRENCY of a queue's jobs run at once across
    every worker, and at most PER_KEY per partition key; FAIR queues are claimed round-robin
    across partition keys, each key WEIGHTS names taking that many jobs per round; starts
    weighing at most RATE within any window of PERIOD, and at most RATE_PER_KEY per key (blank:
    no such cap); how many run now, and how many ready jobs wait because of a concurrency
    limit. Under a per-key cap, the busiest keys with theirs.

    Read-only: the database is opened as for ``caravel status``.
    """

    async def go() -> list[QueueLimitUsage]:
        async with open_inspector(url) as reader:
            return await reader.queue_limit_usage(keys=keys)

    try:
        found = asyncio.run(go())
    except CaravelError as exc:
        raise fail("queues limits show", exc, as_json=as_json, url=url) from None
    if as_json:
        emit({"limits": [_limit_fields(usage) for usage in found]})
        return
    if not found:
        typer.echo("no queue has a limit")
        return
    from rich.table import Table
    from rich.text import Text

    from caravel.cli.render import console, keys_table, period_text

    table = Table(title="Queue limits")
    columns = (
        "queue",
        "concurrency",
        "per key",
        "fair",
        "weights",
        "running",
        "waiting",
        "rate",
        "rate per key",
        "used",
        "period",
        "set at (UTC)",
    )
    for column in columns:
        table.add_column(column)
    for usage in found:
        limit = usage.limit
        table.add_row(
            Text(limit.queue),
            *("" if cap is None else str(cap) for cap in (limit.concurrency, limit.per_key)),
            "yes" if limit.fair else "",
            Text(", ".join(f"{key}={weight}" for key, weight in limit.weights.items())),
            str(usage.running),
            str(usage.waiting),
            *("" if cap is None else str(cap) for cap in (limit.rate, limit.rate_per_key)),
            "" if usage.rate_used is None else str(usage.rate_used),
            period_text(limit.rate_period_ms),
            timestamp(from_ms(limit.updated_at)),
        )
    console().print(table)
    for usage in found:
        if usage.keys:
            console().print(keys_table(usage.limit.queue, usage.limit.per_key, usage.keys))


@limits_app.command("set")
def set_limits(
    queue: QueueName,
    url: DatabaseUrl,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency", help="At most this many of its jobs run at once, on every worker."
        ),
    ] = None,
    per_key: Annotated[
        int | None,
        typer.Option("--per-key", help="At most this many run at once per partition key."),
    ] = None,
    rate: Annotated[
        int | None,
        typer.Option("--rate", help="Its starts weigh at most this much within any period."),
    ] = None,
    rate_per_key: Annotated[
        int | None,
        typer.Option("--rate-per-key", help="The same, per partition key."),
    ] = None,
    period: Annotated[
        int | None,
        typer.Option("--period", help="The rate's window in seconds, 1 to 86400 (default 1)."),
    ] = None,
    fair: Annotated[
        bool,
        typer.Option(
            "--fair", help="Claim its ready jobs round-robin across partition keys (tenants)."
        ),
    ] = False,
    weight: Annotated[
        list[str] | None,
        typer.Option(
            "--weight",
            metavar="KEY=N",
            help="With --fair: partition key KEY gets N jobs per round (repeat for more keys).",
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Set a queue's concurrency limits and fair dispatch (--concurrency, --per-key, --fair,
    --weight) or its rates (--rate, --rate-per-key, --period), replacing those of the kind
    given (a cap of that kind not given is removed, fairness is off unless --fair is given) and
    keeping the other kind.

    Running workers follow the change within their poll interval (on PostgreSQL at once).
    Jobs already running are not touched; over a lowered limit, none is claimed until enough
    of them finish, and under a lowered rate none starts until the window allows it.
    """
    from caravel.flow import ConcurrencyLimit, RateLimit

    rated = rate is not None or rate_per_key is not None or period is not None
    concurrent = concurrency is not None or per_key is not None or fair or bool(weight) or not rated
    limits: list[ConcurrencyLimit | RateLimit] = []

    async def go() -> QueueLimit | None:
        async with open_writer(url) as q:
            for limit in limits:
                await q.set_queue_limit(limit)
        async with open_inspector(url) as reader:
            found = await reader.queue_limit_usage(queue, keys=0)
        return found[0].limit if found else None

    try:
        if concurrent:
            limits.append(
                ConcurrencyLimit(
                    queue=queue,
                    concurrency=concurrency,
                    per_key=per_key,
                    fair=fair,
                    weights=_weights(weight),  # type: ignore[arg-type]
                )
            )
        if rated:
            window = timedelta(seconds=1 if period is None else period)
            limits.append(RateLimit(queue=queue, rate=rate, per_key=rate_per_key, period=window))
        stored = asyncio.run(go())
    except (CaravelError, OverflowError) as exc:
        if isinstance(exc, OverflowError):
            exc = ValidationError("period", "must be from 1 second to 1 day")
        raise fail("queues limits set", exc, as_json=as_json, url=url) from None
    if stored is None:  # cleared by another operator in between
        stored = QueueLimit(queue, None, None, 0)
    fields = _caps(stored)
    if as_json:
        emit(fields)
        return
    caps = [
        f"{name.replace('_', ' ')} {value}"
        for name, value in fields.items()
        if name not in ("queue", "period_ms", "fair", "weights") and value is not None
    ]
    if stored.rate_period_ms is not None:
        from caravel.cli.render import period_text

        caps.append(f"per {period_text(stored.rate_period_ms)}")
    if stored.fair:
        shares = ", ".join(f"{key}={n}" for key, n in stored.weights.items())
        caps.append(f"fair ({shares})" if shares else "fair")
    typer.echo(f"limited {queue}: {', '.join(caps)}")


@limits_app.command("clear")
def clear_limits(
    queue: QueueName,
    url: DatabaseUrl,
    only: Annotated[
        str | None,
        typer.Option("--only", help="Remove only this kind: concurrency (with fairness) or rate."),
    ] = None,
    as_json: Json = False,
) -> None:
    """Remove a queue's limits (or only its concurrency caps or only its rates, --only):
    workers claim its waiting jobs without them as soon as they read the change. Exit 0 also
    when it had none."""

    async def go() -> bool:
        async with open_writer(url) as q:
            if only == "concurrency":
                return await q.clear_queue_limit(queue, "concurrency")
            if only == "rate":
                return await q.clear_queue_limit(queue, "rate")
            return await q.clear_queue_limit(queue)

    try:
        check_queue_name(queue)
        if only not in (None, "concurrency", "rate"):
            raise ValidationError("only", "must be 'concurrency' or 'rate'")
        changed = asyncio.run(go())
    except CaravelError as exc:
        raise fail("queues limits clear", exc, as_json=as_json, url=url) from None
    if as_json:
        emit({"queue": queue, "changed": changed})
    else:
        typer.echo(f"cleared the limits of {queue}" if changed else f"{queue} had no limits")
