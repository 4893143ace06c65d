"""The secret canary, on PostgreSQL, SQLite and ``memory://``: what a handler's exception holds
reaches nothing Caravel writes or serves, unless the handler marked it safe.

Handlers fail in every way an exception can carry text (its message, its other arguments, its
notes, its cause and context, a group's members, ``__str__`` of its own, ``SystemExit``'s code,
a ``JobFailed`` or ``Discard`` not marked safe), under a redactor that fails on some of them
quoting the exception and returns a list for others. Each job fails, retries and dead-letters;
then every place the run left text is read: every column of every table (read from the
database, not from the library's schema), the SQLite file and its journal as bytes, the
in-memory store's state, every log record of every logger at DEBUG (traceback text included),
every span and metric the SDK saw, and the dashboard's pages about those jobs. The secret is in
none of them. A second test marks a detail safe and finds that detail, cleaned, exactly where it
belongs (the attempt's record, the failure log lines, the attempt's span) and nothing else of
the message anywhere.

The job's own data (payload, tenant, idempotency key) holds a second canary: stored where it
belongs, never in spans, metrics or Caravel's logs.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

import pytest
import sqlalchemy as sa
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from sqlalchemy.engine import make_url

from caravel import (
    DatabaseQueue,
    Discard,
    JobContext,
    JobFailed,
    JobState,
    QueueWorker,
    WorkerOptions,
)
from caravel.limits import MAX_DETAIL_LENGTH
from caravel.testing import ManualClock
from tests.support import Add, dispatch, inspector_of, open_queue, registry_for, status_of
from tests.support.dashboard.fixtures import client_for, make_dashboard
from tests.support.databases import sync_engine
from tests.support.telemetry import Telemetry, metric_texts, span_texts

#: Only ever in exceptions: it may appear nowhere.
SECRET = "canary-exc-41c2a9f0"
#: The job's own data: its payload, tenant and idempotency key hold it.
DATA = "canary-data-7d3b9e51"
#: The columns that hold the job's own data.
#: (MariaDB's jobs table also holds the tenant in the generated column its per-key index reads.)
DATA_COLUMNS = {"payload", "tenant_id", "idempotency_key", "partition_key_or_tenant"}

#: Database drivers log their own SQL and parameters at DEBUG (the payload among them), and the
#: test's HTTP client the URLs it asks for (the tenant among them); those are not Caravel's
#: lines, but they too never see an exception's text.
OTHER_LOGGERS = ("aiosqlite", "sqlalchemy", "psycopg", "httpx", "httpcore")

app_tracer = trace.get_tracer("tests.secrets")


class CanaryError(Exception):
    """The handler's failure; its message holds the secret."""


class Sneaky(Exception):
    """An exception whose text is its own: no argument holds the secret, ``str`` makes it."""

    def __str__(self) -> str:
        return f"cannot reach {SECRET}"


class NotWanted(Discard):
    """A discard of the application's own, not marked safe."""


def chained() -> CanaryError:
    """A failure carrying the secret in every place an exception can."""
    try:
        try:
            raise KeyError(f"lookup of {SECRET}")
        except KeyError:
            raise ValueError(f"context {SECRET}") from LookupError(f"cause {SECRET}")
    except ValueError as inner:
        error = CanaryError(f"could not process {SECRET}", {"card": SECRET})
        error.add_note(f"while charging {SECRET}")
        error.__cause__ = inner
        return error


def fail(job: Add) -> None:
    """Fail as ``job.amount`` says, every time with the secret."""
    match job.amount:
        case 1:
            raise chained()
        case 2:
            raise JobFailed(f"provider answered 503 for {SECRET}")
        case 3:
            discard = NotWanted("NotWanted")
            discard.add_note(SECRET)
            raise discard
        case 4:
            raise Sneaky()
        case 5:
            raise SystemExit(f"exit {SECRET}")
        case 6:
            raise ExceptionGroup(f"group {SECRET}", [ValueError(SECRET), TypeError(SECRET)])
        case 7:
            raise UnicodeDecodeError("utf-8", SECRET.encode(), 0, 1, f"bad {SECRET}")
    raise AssertionError("no such failure")


FAILURES = {
    1: ("HandlerFailed", "tests.integration.telemetry.test_secrets.CanaryError"),
    2: ("HandlerFailed", "caravel.directives.JobFailed"),
    3: ("NotWanted", "tests.integration.telemetry.test_secrets.NotWanted"),
    4: ("HandlerFailed", "tests.integration.telemetry.test_secrets.Sneaky"),
    5: ("HandlerExited", "builtins.SystemExit"),
    6: ("HandlerFailed", "builtins.ExceptionGroup"),
    7: ("HandlerFailed", "builtins.UnicodeDecodeError"),
}


def careless_redactor(exc: BaseException) -> str | None:
    """A redactor that goes wrong with the exception's text in hand: it raises quoting it, or
    returns it in a list. Neither gets anywhere."""
    if isinstance(exc, Sneaky | ExceptionGroup):
        raise RuntimeError(f"cannot redact {exc}")
    if isinstance(exc, SystemExit | UnicodeDecodeError):
        return [str(exc)]  # type: ignore[return-value]
    return None


# ----- where a run leaves text --------------------------------------------------------------


@dataclasses.dataclass
class Left:
    """Every text a run left, each with where it is."""

    texts: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def add(self, found: Iterator[tuple[str, str]]) -> None:
        self.texts.extend(found)

    def holding(self, needle: str) -> list[str]:
        return sorted({where for where, text in self.texts if needle in text})


def table_texts(url: str) -> Iterator[tuple[str, str]]:
    """Every value of every column of every table the database has (its own list of tables,
    not the library's schema)."""
    engine = sync_engine(url)
    try:
        with engine.connect() as conn:
            quote = conn.dialect.identifier_preparer.quote
            for table in sa.inspect(conn).get_table_names():
                result = conn.execute(sa.text(f"SELECT * FROM {quote(table)}"))
                columns = list(result.keys())
                for row in result:
                    for column, value in zip(columns, row, strict=True):
                        if value is not None:
                            yield f"{table}.{column}", str(value)
    finally:
        engine.dispose()


def file_texts(url: str) -> Iterator[tuple[str, str]]:
    """A SQLite database's files as bytes (each byte one character, so an ASCII needle is
    found wherever its bytes are): the database, its WAL and its rollback journal."""
    path = Path(str(make_url(url).database))
    for suffix in ("", "-wal", "-journal"):
        file = path.with_name(path.name + suffix)
        if file.exists():
            yield f"file {file.name}", file.read_bytes().decode("latin-1")


def memory_texts(queue: DatabaseQueue) -> Iterator[tuple[str, str]]:
    """Every text reachable from an in-memory store's state: its tables and rows, through
    containers and Caravel's own objects (not functions, locks or the event loop)."""
    store = getattr(queue.store, "inner", queue.store)
    seen: set[int] = set()
    pending: list[tuple[object, str]] = [(store, "memory")]
    while pending:
        value, where = pending.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, str):
            yield where, value
        elif isinstance(value, bytes):
            yield where, value.decode("latin-1")
        elif isinstance(value, dict):
            for key, item in value.items():
                pending += [(key, where), (item, f"{where}[]")]
        elif isinstance(value, list | tuple | set | frozenset):
            pending += [(item, where) for item in value]
        elif type(value).__module__.startswith("caravel."):
            names = set(getattr(value, "__dict__", {}))
            for kind in type(value).__mro__:
                slots = vars(kind).get("__slots__", ())
                names.update((slots,) if isinstance(slots, str) else slots)
            for name in names:
                if hasattr(value, name):
                    pending.append((getattr(value, name), f"{where}.{name}"))


def log_texts(caplog: pytest.LogCaptureFixture, *, others: bool) -> Iterator[tuple[str, str]]:
    """Every log record's message, fields and formatted text (a traceback included); with
    ``others``, those of the drivers and the HTTP client too."""
    formatter = logging.Formatter()
    for record in caplog.records:
        if not others and record.name.startswith(OTHER_LOGGERS):
            continue
        where = f"log {record.name} {record.msg!r}"
        yield where, record.getMessage()
        yield where, formatter.format(record)
        for key, value in vars(record).items():
            yield f"{where} field {key}", str(value)


def telemetry_texts(otel: Telemetry) -> Iterator[tuple[str, str]]:
    for span in otel.spans():
        for where, text in span_texts(span):
            yield f"span {span.name!r}: {where}", text
    for where, text in metric_texts(otel.metrics_data()):
        yield f"metric {where}", text


async def page_texts(url: str, job_ids: list[UUID]) -> Iterator[tuple[str, str]]:
    """The dashboard's pages about the jobs, as an operator (who sees the most) reads them."""
    app = make_dashboard(url)
    where = urlencode({"queue": "default", "tenant": DATA})
    paths = ["/", "/jobs", f"/jobs?{where}", "/dead-letters", f"/dead-letters?{where}"]
    paths += [f"/jobs/{job_id}?{where}" for job_id in job_ids]
    found: list[tuple[str, str]] = []
    try:
        async with client_for(app, "operator") as client:
            for path in paths:
                response = await client.get(path)
                assert response.status_code == 200, (path, response.status_code)
                found.append((f"page {path}", response.text))
    finally:
        await app.close()
    return iter(found)


async def store_texts(url: str, queue: DatabaseQueue) -> Iterator[tuple[str, str]]:
    """What the queue's store holds, read while it is open."""
    if url.startswith("memory://"):
        return memory_texts(queue)
    found = list(table_texts(url))
    if url.startswith("sqlite"):
        found += file_texts(url)
    return iter(found)


async def run_to_dead_letters(worker: QueueWorker, clock: ManualClock, attempts: int) -> None:
    """Run every job until each used its attempts, moving the clock past each backoff."""
    for _ in range(attempts):
        while await worker.run_once("default"):
            pass
        await clock.advance(timedelta(hours=1))


# ----- the tests ----------------------------------------------------------------------------


async def test_no_exception_text_reaches_rows_files_logs_telemetry_or_pages(
    store_url: str, otel: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = ManualClock()
    left = Left()

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        fail(job)

    options = WorkerOptions(redactor=careless_redactor)
    async with (
        open_queue(store_url, registry_for(handle), clock=clock, max_attempts=2) as queue,
        QueueWorker(queue, options=options) as worker,
    ):
        with app_tracer.start_as_current_span("request"):
            ids = [
                (
                    await queue.enqueue(Add(n, note=DATA), dispatch(f"key-{DATA}-{n}", tenant=DATA))
                ).job_id
                for n in FAILURES
            ]
        await run_to_dead_letters(worker, clock, attempts=2)
        for n, job_id in zip(FAILURES, ids, strict=True):
            status = await status_of(queue, job_id, tenant=DATA)
            assert status.state is JobState.DEAD_LETTER, n
            assert (status.last_failure, status.error_class) == FAILURES[n]
        assert await queue.get_payload(ids[0], "default", DATA) is not None
        assert await inspector_of(queue).list_jobs(tenant_id=DATA)
        left.add(await store_texts(store_url, queue))
        left.add(await page_texts(store_url, ids))
    if store_url.startswith("sqlite"):
        left.add(file_texts(store_url))  # once more, after the close's checkpoint

    # Each place was read: the job's own data is where it belongs.
    assert left.holding(DATA), "the store's texts were not read"
    assert any(where.startswith("page /jobs/") for where in left.holding(DATA))
    processes = otel.spans("process default")
    assert len(processes) == 2 * len(FAILURES) - 1  # a discard dead-letters at once
    assert {dict(s.attributes or {})["error.type"] for s in processes} >= {"CanaryError", "Sneaky"}
    assert all(s.status.status_code is StatusCode.ERROR for s in processes)
    assert all(s.status.description is None and s.events == () for s in processes)
    assert {"request", "send default", "caravel.store.job_fail"} <= {s.name for s in otel.spans()}
    assert [r for r in caplog.records if r.getMessage().startswith("redactor failed")]
    failed_lines = [r for r in caplog.records if r.getMessage() == "job handler failed"]
    assert len(failed_lines) == 2 * (len(FAILURES) - 1)  # a discard is no handler failure

    left.add(log_texts(caplog, others=True))
    left.add(telemetry_texts(otel))
    assert left.holding(SECRET) == []

    # The job's data only where it belongs: its own columns and bytes, the pages that show it,
    # the drivers' logs of the statements that wrote it, the client's of the URLs it asked for.
    data_left = Left()
    data_left.add(telemetry_texts(otel))
    data_left.add(log_texts(caplog, others=False))
    assert data_left.holding(DATA) == []
    stored = [w for w in left.holding(DATA) if w.startswith("caravel_")]
    assert {w.partition(".")[2] for w in stored} <= DATA_COLUMNS


async def test_a_detail_marked_safe_is_kept_cleaned_and_nothing_else_of_the_message(
    store_url: str, otel: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    safe = "provider answered 503"
    long_tail = "z" * MAX_DETAIL_LENGTH  # past the limit: cut away

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        try:
            raise ConnectionError(f"503 from provider for {SECRET}")
        except ConnectionError as exc:
            failure = JobFailed(
                f"{safe} for {SECRET}",
                safe_detail=f"\t{safe}\n\x1b[0m\u202e" + (long_tail if job.amount == 2 else ""),
            )
            failure.add_note(SECRET)
            raise failure from exc

    async with (
        open_queue(store_url, registry_for(handle), max_attempts=1) as queue,
        QueueWorker(queue) as worker,
    ):
        short = (await queue.enqueue(Add(1, note=DATA), dispatch(tenant=DATA))).job_id
        cut = (await queue.enqueue(Add(2, note=DATA), dispatch(tenant=DATA))).job_id
        details = {}
        for _ in range(2):
            step = await worker.step("default")
            assert step is not None
            assert step.held
            assert step.outcome is not None
            details[step.claimed.job_id] = step.outcome.detail  # the failed attempt's
        left = Left()
        left.add(await store_texts(store_url, queue))

    kept = f"{safe} [0m"
    kept_cut = kept + "z" * (MAX_DETAIL_LENGTH - 1 - len(kept)) + "\u2026"
    assert details == {short: kept, cut: kept_cut}
    assert len(kept_cut) == MAX_DETAIL_LENGTH

    # Nothing else of the message in the store.
    assert left.holding(SECRET) == []
    assert left.holding("z" * (MAX_DETAIL_LENGTH - len(safe))) == []

    # The failure log lines and the attempt's span carry it; metrics never do.
    lines = [r for r in caplog.records if r.getMessage() in ("job handler failed", "job failed")]
    assert sorted(r.detail for r in lines) == sorted([kept, kept_cut] * 2)  # type: ignore[attr-defined]
    spans = otel.spans("process default")
    assert sorted(dict(s.attributes or {})["caravel.failure.detail"] for s in spans) == sorted(
        [kept, kept_cut]
    )
    telemetry = Left()
    telemetry.add(metric_texts(otel.metrics_data()))
    assert telemetry.holding(safe) == []
    everything = Left()
    everything.add(log_texts(caplog, others=True))
    everything.add(telemetry_texts(otel))
    assert everything.holding(SECRET) == []
