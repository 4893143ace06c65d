"""``caravel bridge``: carry work between the queue's databases and a message broker.

``publish`` relays outbox intents to the broker (egress); ``consume`` turns broker messages
into jobs (ingress). The ``--broker`` URL's scheme picks the adapter (``amqp://``: RabbitMQ,
``nats://``: NATS JetStream), imported only then.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

import typer

from caravel.cli.apps import load_registry
from caravel.cli.connect import process_url
from caravel.cli.failure import exit_code, fail
from caravel.cli.flags import FlagError, flag_message, seconds
from caravel.cli.jsonout import emit
from caravel.cli.logs import configure_logging, parse_level
from caravel.cli.options import DatabaseUrl
from caravel.errors import CaravelError, OptionsError, StoreError, ValidationError
from caravel.outbox import OUTBOX_TABLE

if TYPE_CHECKING:
    from caravel.bridge.ports import Broker
    from caravel.bridge.routing import EgressRoutes, IngressRoutes
    from caravel.registry import JobRegistry

app = typer.Typer(
    help="Carry jobs between Caravel and a message broker (RabbitMQ, NATS JetStream).",
    no_args_is_help=True,
    rich_markup_mode=None,
)

#: The flag behind each option field, for errors in the words the operator typed.
FLAGS = {
    "batch_size": "--batch-size",
    "poll_interval": "--poll-interval",
    "outage_window": "--outage-window",
    "fetch_timeout": "--fetch-timeout",
    "max_in_flight": "--prefetch",
    "broker": "--broker",
    "stream": "--stream",
    "subjects": "--subject",
    "duplicate_window": "--duplicate-window",
    "dead_letter_subject": "--dead-letter-subject",
    "filter_subject": "--filter-subject",
    "ack_wait": "--ack-wait",
}

BrokerUrl = Annotated[
    str,
    typer.Option(
        "--broker",
        envvar="CARAVEL_BROKER_URL",
        show_envvar=True,
        metavar="URL",
        help="The broker: amqp://user:password@host:5672/ (RabbitMQ) or nats://host:4222 "
        "(NATS JetStream).",
    ),
]
Declare = Annotated[
    bool,
    typer.Option(
        "--declare/--no-declare",
        help="Declare the broker topology the guide describes (default), or use what exists.",
    ),
]
Once = Annotated[bool, typer.Option("--once", help="Run one pass and exit.")]
AsJson = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Progress and the final counts as JSON documents on stdout (one per line); "
        "errors as JSON on stderr.",
    ),
]
Progress = Annotated[
    float,
    typer.Option(
        metavar="SECONDS", help="Seconds between progress reports while running (0: none)."
    ),
]
OutageWindow = Annotated[
    float,
    typer.Option(
        metavar="SECONDS",
        help="How long to keep retrying a broker that cannot be reached before exiting 1.",
    ),
]
BatchSize = Annotated[int, typer.Option(metavar="N", help="Messages per pass (1-1000).")]
Verbose = Annotated[
    bool, typer.Option("--verbose", "-v", help="Debug logging (the same as --log-level debug).")
]
LogLevel = Annotated[
    str | None,
    typer.Option(
        "--log-level", metavar="LEVEL", help="debug, info (the default), warning or error."
    ),
]


Stream = Annotated[
    str | None,
    typer.Option(
        metavar="NAME",
        help="NATS: the JetStream stream to declare (with --subject) when it does not exist.",
    ),
]
StreamSubjects = Annotated[
    list[str] | None,
    typer.Option(
        "--subject",
        metavar="SUBJECT",
        help="NATS: a subject the declared --stream captures (wildcards allowed); repeatable.",
    ),
]
DuplicateWindow = Annotated[
    float | None,
    typer.Option(
        metavar="SECONDS",
        help="NATS: the declared streams' duplicate window, in which a re-sent message id is "
        "dropped (default 600).",
    ),
]


# ----- flags into options ------------------------------------------------------------------


def egress_routes(specs: list[str]) -> EgressRoutes:
    """``--route`` values (``WIRE_NAME=DEST``, ``queue:NAME=DEST``, ``*=DEST``; ``DEST`` is
    ``EXCHANGE/ROUTING_KEY``, or a key or NATS subject alone) as routes."""
    from caravel.bridge.messages import Destination
    from caravel.bridge.routing import EgressRoutes

    by_type: dict[str, Destination] = {}
    by_queue: dict[str, Destination] = {}
    default: Destination | None = None
    for spec in specs:
        target, sep, where = spec.partition("=")
        if not sep or not target or not where:
            raise FlagError(f"--route must be WIRE_NAME=DEST, queue:NAME=DEST or *=DEST: {spec!r}")
        exchange, slash, key = where.rpartition("/")
        destination = Destination(key=key, exchange=exchange if slash else "")
        if target == "*":
            default = destination
        elif target.startswith("queue:"):
            by_queue[target.removeprefix("queue:")] = destination
        else:
            by_type[target] = destination
    if not (by_type or by_queue or default):
        raise FlagError("--route is required: where each intent goes (WIRE_NAME=DEST, *=DEST)")
    try:
        return EgressRoutes(by_job_type=by_type, by_queue=by_queue, default=default)
    except ValidationError as exc:
        raise FlagError(f"--route {exc.field} {exc.rule}") from None


def ingress_routes(
    registry: JobRegistry,
    specs: list[str],
    *,
    queue: str,
    type_header: bool,
    accept: list[str],
) -> IngressRoutes:
    """``--route PATTERN=WIRE_NAME[@QUEUE]`` values (and ``--type-header``) as routes."""
    from caravel.bridge.routing import IngressRoute, IngressRoutes

    rules: list[IngressRoute] = []
    try:
        for spec in specs:
            pattern, sep, rest = spec.partition("=")
            if not sep or not pattern or not rest:
                raise FlagError(f"--route must be PATTERN=WIRE_NAME[@QUEUE]: {spec!r}")
            wire_name, at, into = rest.partition("@")
            rules.append(IngressRoute(pattern, wire_name, into if at else queue))
        if not rules and not type_header:
            raise FlagError(
                "--route or --type-header is required: how a message picks its job type"
            )
        return IngressRoutes(
            registry, rules, header_queue=queue if type_header else None, accept=accept
        )
    except ValidationError as exc:
        raise FlagError(f"--route {exc.field} {exc.rule}") from None


def nats_options(
    *,
    stream: str | None = None,
    subject: list[str] | None = None,
    duplicate_window: float | None = None,
    dead_letter_subject: str | None = None,
    filter_subject: str | None = None,
    ack_wait: float | None = None,
) -> dict[str, Any]:
    """The NATS-only flags given (and only those) as the JetStream adapter's options."""
    options: dict[str, Any] = {
        "stream": stream,
        "subjects": tuple(subject) if subject else None,
        "dead_letter_subject": dead_letter_subject,
        "filter_subject": filter_subject,
    }
    if duplicate_window is not None:
        options["duplicate_window"] = seconds("--duplicate-window", duplicate_window)
    if ack_wait is not None:
        options["ack_wait"] = seconds("--ack-wait", ack_wait)
    return {name: value for name, value in options.items() if value is not None}


def broker_options(
    broker: str,
    *,
    declare: bool,
    bind: list[str],
    dead_letter_exchange: str | None,
    nats: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the adapter of ``broker``'s scheme is opened with; the RabbitMQ-only flags are
    refused for another broker, and the NATS-only ones (``nats``) likewise. An unknown
    scheme, or one whose extra is missing, is a :class:`~caravel.errors.ValidationError` here,
    before anything is opened."""
    from caravel.bridge.brokers import check_broker_url

    check_broker_url(broker)
    scheme = urlsplit(broker).scheme.lower()
    options: dict[str, Any] = {"declare": declare}
    if nats and scheme not in ("nats", "tls"):
        raise FlagError(
            "--stream, --subject, --duplicate-window, --dead-letter-subject, --filter-subject "
            "and --ack-wait are for nats:// brokers only"
        )
    options.update(nats or {})
    if scheme in ("amqp", "amqps"):
        bindings: list[tuple[str, str]] = []
        for spec in bind:
            exchange, sep, pattern = spec.partition(":")
            if not sep or not exchange or not pattern:
                raise FlagError(f"--bind must be EXCHANGE:PATTERN: {spec!r}")
            bindings.append((exchange, pattern))
        options["bindings"] = bindings
        options["dead_letter_exchange"] = dead_letter_exchange
    elif bind or dead_letter_exchange is not None:
        raise FlagError("--bind and --dead-letter-exchange are for amqp:// brokers only")
    return options


# ----- running a service -------------------------------------------------------------------


class _Reporter:
    """Progress every ``interval`` seconds while a service runs, as a line on stderr or (with
    ``--json``) a document on stdout."""

    def __init__(self, command: str, interval: float, as_json: bool) -> None:
        self.command = command
        self.interval = interval
        self.as_json = as_json

    def say(self, message: str) -> None:
        typer.echo(f"caravel bridge {self.command}: {message}", err=True)

    def report(self, counts: Mapping[str, int], *, final: bool) -> None:
        if self.as_json:
            emit({"event": "stopped" if final else "progress", **counts})
        else:
            said = ", ".join(f"{value} {name.replace('_', ' ')}" for name, value in counts.items())
            self.say(f"stopped; {said}" if final else said)

    async def every(self, counts: Callable[[], Mapping[str, int]]) -> None:
        if self.interval <= 0:
            return
        last: Mapping[str, int] | None = None
        while True:
            await asyncio.sleep(self.interval)
            now = counts()
            if now != last:
                self.report(now, final=False)
                last = now


async def _until_signalled(
    service_run: Awaitable[None], stop: Callable[[], None], reporter: _Reporter, counts: Any
) -> None:
    """Run the service until SIGTERM or SIGINT asks it to stop after its pass, reporting
    progress meanwhile."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop)
    progress = asyncio.create_task(reporter.every(counts))
    try:
        await service_run
    finally:
        progress.cancel()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


async def _open(broker: str, options: dict[str, Any]) -> Broker:
    from caravel.bridge.brokers import open_broker

    return await open_broker(broker, **options)


def _failed(
    command: str, exc: BaseException, *, as_json: bool, url: str | None, database: str = "queue"
) -> typer.Exit:
    if isinstance(exc, OptionsError):  # a number out of its range, said with the flag
        return fail(f"bridge {command}", FlagError(flag_message(exc, FLAGS)), as_json=as_json)
    # A runtime failure stopped a running bridge; a set-up one (exit 2) never let it start.
    stopped = ": stopped" if exit_code(exc) == 1 else ""
    return fail(
        f"bridge {command}{stopped}",
        exc,
        as_json=as_json,
        url=url if isinstance(exc, StoreError) else None,
        database=database,
    )


# ----- caravel bridge publish --------------------------------------------------------------


@app.command()
def publish(
    broker: BrokerUrl,
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
    route: Annotated[
        list[str],
        typer.Option(
            metavar="TARGET=DEST",
            help="Where intents go, repeatable: WIRE_NAME=DEST, queue:NAME=DEST or *=DEST; "
            "DEST is EXCHANGE/ROUTING_KEY (RabbitMQ) or a SUBJECT (NATS).",
        ),
    ],
    table: Annotated[str, typer.Option(metavar="NAME", help="Outbox table name.")] = OUTBOX_TABLE,
    batch_size: BatchSize = 100,
    poll_interval: Annotated[
        float,
        typer.Option(metavar="SECONDS", help="Seconds between passes that found nothing more."),
    ] = 1.0,
    outage_window: OutageWindow = 60.0,
    declare: Declare = True,
    stream: Stream = None,
    subject: StreamSubjects = None,
    duplicate_window: DuplicateWindow = None,
    once: Once = False,
    progress: Progress = 10.0,
    as_json: AsJson = False,
    verbose: Verbose = False,
    log_level: LogLevel = None,
) -> None:
    """Publish committed outbox intents to a broker, at least once.

    Each intent becomes a persistent message whose id is the intent's id, published with the
    broker's confirmation; only then is it recorded as dispatched. A relay killed between the
    two sends those intents again under the same ids. Runs until SIGTERM or SIGINT (the pass
    under way finishes), or for one pass with --once. Exit code 0 after a normal shutdown; 2
    for invalid flags or a missing broker extra; 1 when the database fails or the broker stays
    unreachable for longer than --outage-window, so a supervisor restarts it.
    """
    reporter = _Reporter("publish", progress, as_json)
    try:
        configure_logging(level=parse_level(log_level, verbose))
        routes = egress_routes(route)
        nats = nats_options(stream=stream, subject=subject, duplicate_window=duplicate_window)
        options = broker_options(
            broker, declare=declare, bind=[], dead_letter_exchange=None, nats=nats
        )
        poll = seconds("--poll-interval", poll_interval)
        window = seconds("--outage-window", outage_window)
    except (FlagError, CaravelError) as exc:
        raise fail("bridge publish", exc, as_json=as_json) from None
    try:
        published, stuck = asyncio.run(
            _publish(
                broker, options, app_url, routes, table, batch_size, poll, window, once, reporter
            )
        )
    except CaravelError as exc:
        raise _failed(
            "publish", exc, as_json=as_json, url=app_url, database="application"
        ) from None
    reporter.report({"published": published, "undeliverable": stuck}, final=True)


async def _publish(
    broker_url: str,
    options: dict[str, Any],
    app_url: str,
    routes: EgressRoutes,
    table: str,
    batch_size: int,
    poll: timedelta,
    window: timedelta,
    once: bool,
    reporter: _Reporter,
) -> tuple[int, int]:
    from caravel.bridge.egress import BrokerRelay
    from caravel.store import open_outbox_store

    # The outbox table first: a wrong --app-url or --table is said before any broker is reached.
    outbox = open_outbox_store(process_url(app_url), table)
    try:
        await outbox.outbox_count_pending()
    finally:
        await outbox.close()
    broker = await _open(broker_url, options)
    try:
        relay = BrokerRelay(
            process_url(app_url),
            await broker.publisher(),
            routes,
            table_name=table,
            batch_size=batch_size,
            poll_interval=poll,
            outage_window=window,
        )
        try:
            if once:
                await relay.run_once()
            else:
                reporter.say(f"publishing to {broker.url}; SIGTERM or Ctrl+C stops")
                await _until_signalled(
                    relay.run(),
                    relay.stop,
                    reporter,
                    lambda: {"published": relay.published, "undeliverable": relay.stuck},
                )
            return relay.published, relay.stuck
        finally:
            await relay.close()
    finally:
        await broker.close()


# ----- caravel bridge consume --------------------------------------------------------------


@app.command()
def consume(
    broker: BrokerUrl,
    url: DatabaseUrl,
    registry_path: Annotated[
        str,
        typer.Option(
            "--app", metavar="MODULE:ATTRIBUTE", help="Your job registry, e.g. myapp.jobs:registry."
        ),
    ],
    source: Annotated[
        str,
        typer.Option(
            metavar="NAME",
            help="What to consume: a RabbitMQ queue, or a JetStream STREAM:DURABLE.",
        ),
    ],
    route: Annotated[
        list[str] | None,
        typer.Option(
            metavar="PATTERN=WIRE_NAME[@QUEUE]",
            help="Messages under a routing key or subject matching PATTERN (* one word, # or > "
            "the rest) become jobs of WIRE_NAME, in QUEUE or --queue; repeatable, first match "
            "wins.",
        ),
    ] = None,
    queue: Annotated[
        str, typer.Option(metavar="NAME", help="The queue jobs go to where a route names none.")
    ] = "default",
    type_header: Annotated[
        bool,
        typer.Option(
            "--type-header",
            help="A message no route matches may name its registered job type in the "
            "caravel-job-type header.",
        ),
    ] = False,
    accept: Annotated[
        list[str] | None,
        typer.Option(
            metavar="WIRE_NAME", help="With --type-header: the only types a header may name."
        ),
    ] = None,
    tenant_optional: Annotated[
        bool,
        typer.Option(
            "--tenant-optional",
            help="A message without a caravel-tenant header goes to the default tenant "
            "(otherwise it is rejected as MissingTenant).",
        ),
    ] = False,
    prefetch: Annotated[
        int, typer.Option(metavar="N", help="Messages delivered and not yet settled, at most.")
    ] = 200,
    batch_size: BatchSize = 100,
    bind: Annotated[
        list[str] | None,
        typer.Option(
            metavar="EXCHANGE:PATTERN",
            help="RabbitMQ: bind the queue to this topic exchange and pattern (with --declare).",
        ),
    ] = None,
    dead_letter_exchange: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="RabbitMQ: the exchange rejected messages go to (default: SOURCE.dlx).",
        ),
    ] = None,
    stream: Stream = None,
    subject: StreamSubjects = None,
    duplicate_window: DuplicateWindow = None,
    dead_letter_subject: Annotated[
        str | None,
        typer.Option(
            metavar="SUBJECT",
            help="NATS: where rejected messages are published (default: their subject + .dlq); "
            "kept by a stream STREAM_DLQ declared when none captures it.",
        ),
    ] = None,
    filter_subject: Annotated[
        str | None,
        typer.Option(
            metavar="SUBJECT",
            help="NATS: what a durable consumer declared here reads (default: its whole stream).",
        ),
    ] = None,
    ack_wait: Annotated[
        float | None,
        typer.Option(
            metavar="SECONDS",
            help="NATS: how long a delivery may stay unsettled before JetStream delivers it "
            "again, for a durable consumer declared here (default 30).",
        ),
    ] = None,
    outage_window: OutageWindow = 60.0,
    declare: Declare = True,
    once: Once = False,
    progress: Progress = 10.0,
    as_json: AsJson = False,
    verbose: Verbose = False,
    log_level: LogLevel = None,
) -> None:
    """Turn broker messages into jobs, exactly one job per message id.

    Each message is mapped to a registered job type (by --route or, with --type-header, its
    header), validated as any enqueue, and enqueued with its message id as the idempotency
    key; the broker gets the acknowledgement only after the job row committed. A message that
    cannot become a job goes to the broker's dead letters with its category. Runs until SIGTERM
    or SIGINT (the pass under way finishes; unsettled messages go back to the broker), or for
    one pass with --once. Exit code 0 after a normal shutdown; 2 for invalid flags, a bad --app,
    a missing broker extra or a queue that is not migrated; 1 when the database fails or the
    broker stays unreachable for longer than --outage-window.
    """
    reporter = _Reporter("consume", progress, as_json)
    try:
        configure_logging(level=parse_level(log_level, verbose))
        registry = load_registry(registry_path)
        routes = ingress_routes(
            registry, route or [], queue=queue, type_header=type_header, accept=accept or []
        )
        nats = nats_options(
            stream=stream,
            subject=subject,
            duplicate_window=duplicate_window,
            dead_letter_subject=dead_letter_subject,
            filter_subject=filter_subject,
            ack_wait=ack_wait,
        )
        options = broker_options(
            broker,
            declare=declare,
            bind=bind or [],
            dead_letter_exchange=dead_letter_exchange,
            nats=nats,
        )
        window = seconds("--outage-window", outage_window)
    except (FlagError, CaravelError) as exc:
        raise fail("bridge consume", exc, as_json=as_json) from None
    settings = _ConsumeSettings(
        source, not tenant_optional, prefetch, batch_size, window, once, reporter
    )
    try:
        counts = asyncio.run(_consume(broker, options, url, registry, routes, settings))
    except CaravelError as exc:
        raise _failed("consume", exc, as_json=as_json, url=url) from None
    reporter.report(counts, final=True)


class _ConsumeSettings:
    def __init__(
        self,
        source: str,
        require_tenant: bool,
        prefetch: int,
        batch_size: int,
        window: timedelta,
        once: bool,
        reporter: _Reporter,
    ) -> None:
        self.source = source
        self.require_tenant = require_tenant
        self.prefetch = prefetch
        self.batch_size = batch_size
        self.window = window
        self.once = once
        self.reporter = reporter


async def _consume(
    broker_url: str,
    options: dict[str, Any],
    url: str,
    registry: JobRegistry,
    routes: IngressRoutes,
    settings: _ConsumeSettings,
) -> dict[str, int]:
    from caravel.bridge.ingress import BrokerConsumer
    from caravel.queue import DatabaseQueue

    async with DatabaseQueue(process_url(url), registry) as queue:
        await queue.check_schema()
        broker = await _open(broker_url, options)
        try:
            subscription = await broker.subscribe(settings.source, max_in_flight=settings.prefetch)
            consumer = BrokerConsumer(
                queue,
                subscription,
                routes,
                require_tenant=settings.require_tenant,
                batch_size=settings.batch_size,
                outage_window=settings.window,
            )

            def counts() -> dict[str, int]:
                return {
                    "enqueued": consumer.created,
                    "already_enqueued": consumer.repeated,
                    "rejected": consumer.rejected,
                }

            if settings.once:
                await consumer.run_once()
            else:
                settings.reporter.say(
                    f"consuming {settings.source} from {broker.url}; SIGTERM or Ctrl+C stops"
                )
                await _until_signalled(consumer.run(), consumer.stop, settings.reporter, counts)
            return counts()
        finally:
            await broker.close()
