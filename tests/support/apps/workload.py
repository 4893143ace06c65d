"""A job registry for tests that run real worker processes (``caravel worker --app
tests.support.apps.workload:registry``).

Handlers leave evidence in the directory named by ``CARAVEL_TEST_EVIDENCE``: a line per execution
in ``ledger-<pid>.log`` (``start``/``end`` with the job id, attempt and a monotonic time), so a
test can tell runs from completions across processes.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

from caravel import JobContext, JobFailed, JobRegistry

registry = JobRegistry()


def _ledger(event: str, ctx: JobContext[object]) -> None:
    directory = Path(os.environ["CARAVEL_TEST_EVIDENCE"])
    line = f"{event} {ctx.job_id} {ctx.attempt} {time.time():.6f} {os.getpid()}\n"
    with open(directory / f"ledger-{os.getpid()}.log", "a", encoding="utf-8") as out:
        out.write(line)
        out.flush()


@dataclass(frozen=True)
class Nap:
    """Sleeps ``seconds`` (cooperatively), recording start and end. With
    ``first_attempt_only`` later attempts finish at once."""

    seconds: float
    label: str = ""
    first_attempt_only: bool = False


@registry.handles("tests.nap.v1", Nap)
async def nap(job: Nap, ctx: JobContext[object]) -> None:
    _ledger("start", ctx)
    if ctx.attempt == 1 or not job.first_attempt_only:
        await asyncio.sleep(job.seconds)  # busy for real: a handler of a real worker
    _ledger("end", ctx)


@dataclass(frozen=True)
class Spin:
    """Holds the CPU in a synchronous handler for ``seconds``, checking for cancellation."""

    seconds: float


@registry.handles("tests.spin.v1", Spin)
def spin(job: Spin, ctx: JobContext[object]) -> None:
    _ledger("start", ctx)
    deadline = time.monotonic() + job.seconds
    while time.monotonic() < deadline:
        if ctx.is_cancelled:
            _ledger("cancelled", ctx)
            return
        sum(range(2000))
    _ledger("end", ctx)


@dataclass(frozen=True)
class Gate:
    """Waits until the file ``name`` appears in the evidence directory, recording start and end
    (an asyncio task: cancelled like any)."""

    name: str


def _gate_open(name: str) -> bool:
    return (Path(os.environ["CARAVEL_TEST_EVIDENCE"]) / name).exists()


@registry.handles("tests.gate.v1", Gate)
async def gate(job: Gate, ctx: JobContext[object]) -> None:
    _ledger("start", ctx)
    # Another process makes the file, so there is no event to wait on: poll for it.
    while not _gate_open(job.name):  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    _ledger("end", ctx)


@dataclass(frozen=True)
class SyncGate:
    """:class:`Gate` in a synchronous handler (a thread of the worker); ``heed_cancel`` makes it
    give up once cancelled, else only the file ends it."""

    name: str
    heed_cancel: bool = True


@registry.handles("tests.sync-gate.v1", SyncGate)
def sync_gate(job: SyncGate, ctx: JobContext[object]) -> None:
    _ledger("start", ctx)
    while not _gate_open(job.name):
        if job.heed_cancel and ctx.is_cancelled:
            _ledger("cancelled", ctx)
            return
        time.sleep(0.02)  # another process makes the file: poll for it
    _ledger("end", ctx)


@dataclass(frozen=True)
class Exit:
    """Calls ``exit(code)`` after recording its start, as a script's error path would, in a
    synchronous handler (one of the worker's threads)."""

    code: int = 1


@registry.handles("tests.exit.v1", Exit)
def exit_job(job: Exit, ctx: JobContext[object]) -> None:
    _ledger("start", ctx)
    exit(job.code)


@dataclass(frozen=True)
class ExitInLoop:
    """:class:`Exit` in an async handler, on the worker's event loop."""

    code: int = 1


@registry.handles("tests.exit-in-loop.v1", ExitInLoop)
async def exit_in_loop(job: ExitInLoop, ctx: JobContext[object]) -> None:
    _ledger("start", ctx)
    exit(job.code)


@dataclass(frozen=True)
class Interrupt:
    """Raises ``KeyboardInterrupt`` from its handler, as Ctrl+C in a handler would."""


@registry.handles("tests.interrupt.v1", Interrupt)
def interrupt(job: Interrupt, ctx: JobContext[object]) -> None:
    _ledger("start", ctx)
    raise KeyboardInterrupt


@dataclass(frozen=True)
class Refuse:
    """Fails with ``secret`` in its exception's message: a ``TimeoutError`` (which
    :func:`redact` describes), or a :class:`~caravel.JobFailed` that marks a detail safe."""

    secret: str
    marked: bool = False


@registry.handles("tests.refuse.v1", Refuse)
async def refuse(job: Refuse, ctx: JobContext[object]) -> None:
    _ledger("start", ctx)
    if job.marked:
        message = f"provider answered 503 for {job.secret}"
        raise JobFailed(message, safe_detail="provider answered 503")
    raise TimeoutError(f"no answer about {job.secret}")


def redact(exc: BaseException) -> str | None:
    """A redactor (``caravel worker --redactor tests.support.apps.workload:redact``)."""
    return "the provider did not answer in time" if isinstance(exc, TimeoutError) else None
