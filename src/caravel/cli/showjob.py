"""``caravel jobs show``: one job, its fields and then its attempt timeline.

As text, the job's fields one a line (the names of its JSON document), then one row per kept
attempt record, oldest first, and how many older records were dropped. Under ``--json``, one
document: the fields, ``payload`` and ``result`` (each only when asked for) and ``attempts``
(:func:`caravel.cli.jsonout.attempt_fields`). Payloads and results appear only with
``--payload`` and ``--result``; an attempt's ``detail`` is what its handler marked safe.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import typer

from caravel.attempts import AttemptRecord
from caravel.cli.connect import open_inspector
from caravel.cli.failure import JobNotFoundError, fail
from caravel.cli.jsonout import attempt_fields, emit, plain, record_fields
from caravel.cli.options import DatabaseUrl, QueueOpt, TenantOpt
from caravel.errors import CaravelError

__all__ = ["show"]


#: What the text says of a job with no attempt record: one is written when an attempt ends.
NO_ATTEMPTS = "no attempts yet: a record is written when an attempt ends"


def show(
    job_id: Annotated[str, typer.Argument(help="The job id.")],
    url: DatabaseUrl,
    queue: QueueOpt = None,
    tenant: TenantOpt = None,
    payload: Annotated[
        bool, typer.Option("--payload", help="Include the stored payload (null otherwise).")
    ] = False,
    result: Annotated[
        bool,
        typer.Option("--result", help="Include the handler's stored result (null otherwise)."),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the job as one JSON object on stdout; errors as JSON too."
        ),
    ] = False,
) -> None:
    """Show one job: its fields, then its attempts, oldest first.

    The id finds it; --queue and --tenant, when given, must be its own exactly. Exit 1 when
    there is no such job.
    """
    try:
        shown, attempts = asyncio.run(_read(job_id, url, queue, tenant, payload, result))
    except (CaravelError, JobNotFoundError) as exc:
        raise fail("jobs show", exc, as_json=as_json, url=url) from None
    if as_json:
        emit({**shown, "attempts": [attempt_fields(a) for a in attempts]})
        return
    # As text, the payload and the result are lines only when asked for.
    asked = {"payload": payload, "result": result}
    _print({k: v for k, v in shown.items() if asked.get(k, True)}, attempts)


async def _read(
    job_id: str, url: str, queue: str | None, tenant: str | None, payload: bool, result: bool
) -> tuple[dict[str, Any], list[AttemptRecord]]:
    from caravel.lookup import parse_job_id

    ident = parse_job_id(job_id, "job_id")
    async with open_inspector(url) as reader:
        found = await reader.find_job(ident, queue=queue, tenant_id=tenant)
        if found is None:
            raise JobNotFoundError(
                "no such job in this queue and tenant"
                if queue is not None or tenant is not None
                else "no such job: no job has this id"
            )
        # Every read names the job's own queue and tenant, as found: never ones typed.
        where = (ident, found.queue, found.tenant_id)
        text = await reader.get_payload(*where) if payload else None
        stored = await reader.get_result(*where) if result else None
        attempts = await reader.get_attempts(*where) or []
    # The stored payload and result are JSON text; each is shown as the JSON value it is.
    # chain_id, chain_step and batch_id say what the job is linked to.
    shown = {
        **record_fields(found),
        "payload": None if text is None else json.loads(text),
        "result": None if stored is None else json.loads(stored),
    }
    return shown, attempts


def _print(shown: Mapping[str, Any], attempts: Sequence[AttemptRecord]) -> None:
    from rich.text import Text

    from caravel.cli.render import attempts_table, console

    # Wider than other tables when piped: a timeline row holds a worker id and three times.
    out = console(width=240)
    width = max(len(name) for name in shown) + 2
    for name, value in shown.items():
        # Text, never markup: a tenant id or a note like "[bold]x" is shown as typed.
        out.print(Text(name.ljust(width) + _cell(value)), soft_wrap=True)
    out.print()
    dropped = int(shown.get("attempts_dropped") or 0)
    if attempts:
        out.print(attempts_table(attempts))
    elif not dropped:
        out.print(Text(NO_ATTEMPTS))
    if dropped:
        noun = "record" if dropped == 1 else "records"
        out.print(Text(f"{dropped} older attempt {noun} dropped (the history's bound)"))


def _cell(value: Any) -> str:
    """A field's value as its JSON document has it, strings unquoted and null as ``-``."""
    value = plain(value)
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
