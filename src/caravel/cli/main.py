"""``caravel``: the operator command line."""

from __future__ import annotations

import inspect
import sys
from typing import Annotated, Any

import typer

from caravel.cli import db, jobs, links, outbox, queues, schedules
from caravel.cli.dashboard import dashboard
from caravel.cli.options import CONTEXT
from caravel.cli.status import status
from caravel.cli.worker import worker
from caravel.cli.workers import workers

#: What each Python type is called where a command names no metavar of its own.
_METAVARS = {"int": "INTEGER", "float": "FLOAT", "str": "TEXT", "list[str]": "TEXT"}

app = typer.Typer(
    name="caravel",
    help="Operate a Caravel job queue: migrations, workers, status, dead letters and pauses.",
    no_args_is_help=True,
    add_completion=False,
    context_settings=CONTEXT,
    rich_markup_mode=None,
)
app.add_typer(db.app, name="db")
app.add_typer(outbox.app, name="outbox")
app.add_typer(jobs.app, name="jobs")
app.add_typer(queues.app, name="queues")
app.add_typer(schedules.app, name="schedules")
app.add_typer(links.batches, name="batches")
app.add_typer(links.chains, name="chains")
app.command()(status)
app.command()(workers)
app.command()(worker)
app.command()(dashboard)


def _print_version(value: bool) -> None:
    if value:
        # Read from the installed distribution's metadata, only when asked for.
        from importlib.metadata import version

        typer.echo(f"caravel {version('caravel-queue')}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the installed version and exit.",
        ),
    ] = False,
) -> None:
    """Operate a Caravel job queue: migrations, workers, status, dead letters and pauses."""


def command() -> Any:  # Typer's Click command (its own copy of Click in newer releases)
    """The command tree as it runs: Click's plain help (it rewraps each paragraph to the
    terminal's width) and a metavar for every option that takes a value. Typer would show the
    Python annotation (``<list[str]>``, ``<bool>``) where a command gave none."""
    root = typer.main.get_command(app)
    pending = [root]
    while pending:
        current = pending.pop()
        if current.help:
            current.help = inspect.cleandoc(current.help)
        for param in current.params:
            if param.metavar is not None or getattr(param, "is_flag", False):
                continue
            if param.param_type_name == "argument":
                _name_only(param)
            else:
                bare = getattr(param, "bare_type", None)  # Typer's, not Click's
                param.metavar = _METAVARS.get(bare() if bare else "", "VALUE")
        pending.extend(getattr(current, "commands", {}).values())
    return root


def _name_only(argument: Any) -> None:
    """Show an argument as Click does, by its name alone: ``JOB_ID`` in the usage line (Typer
    writes ``{job_id}``) and in the Arguments section (where Typer adds ``<str>``)."""
    name = (argument.name or "value").upper()
    argument.metavar = name
    usage = name if argument.required else f"[{name}]"
    # Instance attributes shadow the two methods Typer's help writer calls.
    argument.get_usage_pieces = lambda ctx: [usage]
    argument.display_type_rich = lambda ctx: None


def main() -> None:
    """Console-script entry point. Under ``--json`` a usage error Click finds (an unknown flag,
    a missing option, a value of the wrong type) is the JSON error document too, exit 2."""
    if "--json" not in sys.argv[1:]:
        command().main(prog_name="caravel")
        return
    from caravel.cli.jsonout import error_document

    try:
        code = command().main(prog_name="caravel", standalone_mode=False)
    except Exception as exc:
        # Click's usage errors (whichever copy of Click Typer uses) can format themselves.
        if type(exc).__name__ == "Abort":
            sys.exit(1)
        if not hasattr(exc, "format_message"):
            raise
        ctx = getattr(exc, "ctx", None)
        line = " ".join(f"{ctx.command_path if ctx else 'caravel'}: {exc.format_message()}".split())
        exit_code = int(getattr(exc, "exit_code", 2))
        sys.stderr.write(error_document(type(exc).__name__, line, exit_code) + "\n")
        sys.exit(exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
