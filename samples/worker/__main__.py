"""``python -m caravel_samples.worker COMMAND``: the worker sample's command line."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import Any, TypeVar

import typer
from caravel_samples.worker import results, schema
from caravel_samples.worker.jobs import QUEUE, TENANT, AddToReport, registry
from caravel_samples.worker.settings import Settings
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from caravel import (
    CaravelError,
    DatabaseQueue,
    DispatchOptions,
    QueueInspector,
    QueueOptions,
    QueueWorker,
    WorkerOptions,
)

# The caravel command's JSON convention (docs/reference/cli.md): one object per line, snake_case
# keys, UTC times with milliseconds and a Z.
from caravel.cli.jsonout import counts_document, emit

T = TypeVar("T")

app = typer.Typer(
    help="Caravel's worker sample: three jobs add 1, 2 and 3 to a report. The queue and the "
    "results live in the folder named by CARAVEL_WORKER_DIRECTORY (SQLite), or with "
    "CARAVEL_WORKER_DATABASE_PROVIDER=postgres or mariadb in the database named by "
    "CARAVEL_WORKER_DATABASE_URL.",
    no_args_is_help=True,
    add_completion=False,
)


def _settings() -> Settings:
    try:
        return Settings.from_environment()
    except CaravelError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _queue(settings: Settings) -> DatabaseQueue:
    options = QueueOptions(lease_duration=timedelta(seconds=settings.lease_seconds))
    return DatabaseQueue(settings.queue_url, registry, options=options)


def _scope(engine: AsyncEngine) -> Callable[[], AbstractAsyncContextManager[AsyncSession]]:
    """A fresh results session around each job, reachable as ``ctx.scope``."""
    sessions = async_sessionmaker(engine, expire_on_commit=False)

    @asynccontextmanager
    async def scope() -> AsyncIterator[AsyncSession]:
        async with sessions() as session:
            yield session

    return scope


@app.command()
def migrate() -> None:
    """Apply both migrations (the queue's and the results'), deliberately."""
    settings = _settings()
    _run_sync(lambda: schema.migrate_all(settings))
    queue_name, results_name = settings.names
    typer.echo(f"{queue_name} and {results_name} are at their newest migrations")


@app.command("check-model")
def check_model() -> None:
    """Exit 0 when both schemas are migrated and match their models; 1 with the reason."""
    settings = _settings()
    problems = schema.check_all(settings)
    for problem in problems:
        typer.echo(problem, err=True)
    if problems:
        raise typer.Exit(1)
    typer.echo(
        "both databases are up to date"
        if settings.provider == "sqlite"
        else "the queue's and the results' tables are up to date"
    )


@app.command("enqueue-demo")
def enqueue_demo() -> None:
    """Enqueue the three demo jobs with fixed idempotency keys (repeatable)."""
    settings = _settings()

    async def go() -> list[dict[str, object]]:
        async with _queue(settings) as queue:
            accepted = await queue.enqueue_many(
                [
                    (
                        AddToReport(quantity),
                        DispatchOptions(
                            queue=QUEUE, tenant_id=TENANT, idempotency_key=f"demo-{quantity}"
                        ),
                    )
                    for quantity in (1, 2, 3)
                ]
            )
        return [{"job_id": a.job_id, "already_enqueued": a.already_enqueued} for a in accepted]

    emit({"jobs": _run(go())})


@app.command("work-once")
def work_once() -> None:
    """Process at most one job; print whether one was claimed."""
    settings = _settings()

    async def go() -> bool:
        engine = results.create_engine(settings)
        try:
            async with (
                _queue(settings) as queue,
                QueueWorker(queue, scope=_scope(engine)) as worker,
            ):
                return await worker.run_once(QUEUE)
        finally:
            await engine.dispose()

    emit({"claimed": _run(go())})


@app.command()
def work(
    concurrency: int = typer.Option(1, help="Handlers at once (1-1024)."),
    shutdown_grace: float = typer.Option(
        30.0, help="Seconds in-flight jobs get to finish after SIGTERM/Ctrl+C."
    ),
) -> None:
    """Run the continuous worker until SIGTERM or Ctrl+C. Exit 0 after a normal shutdown, 1
    when the worker faulted (for example, an unmigrated database)."""
    settings = _settings()

    async def go() -> None:
        engine = results.create_engine(settings)
        try:
            async with (
                _queue(settings) as queue,
                QueueWorker(
                    queue,
                    options=WorkerOptions(
                        concurrency=concurrency, shutdown_grace=timedelta(seconds=shutdown_grace)
                    ),
                    scope=_scope(engine),
                ) as worker,
            ):
                loop = asyncio.get_running_loop()
                for signum in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(signum, worker.stop)
                typer.echo("worker running; SIGTERM or Ctrl+C stops", err=True)
                await worker.run(QUEUE)
        finally:
            await engine.dispose()

    _run(go())
    typer.echo("worker stopped", err=True)


@app.command()
def report() -> None:
    """Print the report computed from the results rows."""
    settings = _settings()

    async def go() -> dict[str, int]:
        engine = results.create_engine(settings)
        try:
            return await results.report(engine)
        finally:
            await engine.dispose()

    emit(_run(go()))


@app.command("queue-status")
def queue_status() -> None:
    """Print the queue's counts, read-only (the database is not changed)."""
    settings = _settings()

    async def go() -> dict[str, object]:
        async with QueueInspector(settings.queue_url) as inspector:
            return counts_document(await inspector.queue_counts())

    emit(_run(go()))


def _run_sync(call: Callable[[], None]) -> None:
    """Run one blocking step; a Caravel error ends the command as :func:`_run` does."""
    try:
        call()
    except CaravelError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run one command; a Caravel error (unmigrated database, database failure) ends it with
    exit code 1 and one line naming the problem."""
    try:
        return asyncio.run(coroutine)
    except CaravelError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


if __name__ == "__main__":
    app()
