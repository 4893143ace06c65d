"""``caravel``: the operator command line.

Each top-level command's module is imported only when the tree that holds it is built: the
whole tree for ``caravel --help`` and most runs, the one command alone when the command line
names it first (``caravel worker ...``), so a worker does not import, or build the Click
commands of, every operator command before it starts.
"""

from __future__ import annotations

import gc
import importlib
import inspect
import sys
from typing import Annotated, Any

import typer

from caravel.cli.options import CONTEXT

#: What each Python type is called where a command names no metavar of its own.
_METAVARS = {"int": "INTEGER", "float": "FLOAT", "str": "TEXT", "list[str]": "TEXT"}

#: The top-level command groups and commands, in the order the help lists them: name, module,
#: attribute, and whether it is a group (a Typer app) or a command (a function).
_TOP = (
    ("db", "caravel.cli.db", "app", True),
    ("outbox", "caravel.cli.outbox", "app", True),
    ("jobs", "caravel.cli.jobs", "app", True),
    ("queues", "caravel.cli.queues", "app", True),
    ("schedules", "caravel.cli.schedules", "app", True),
    ("batches", "caravel.cli.links", "batches", True),
    ("chains", "caravel.cli.links", "chains", True),
    ("workflows", "caravel.cli.workflows", "app", True),
    ("status", "caravel.cli.status", "status", False),
    ("workers", "caravel.cli.workers", "workers", False),
    ("worker", "caravel.cli.worker", "worker", False),
    ("dashboard", "caravel.cli.dashboard", "dashboard", False),
    ("metrics", "caravel.cli.metrics", "metrics", False),
)


def _tree(only: str | None = None) -> typer.Typer:
    """The Typer app: every top-level command, or the one named ``only`` (with the root's
    options all the same, so it parses and shows its help exactly as in the whole tree)."""
    tree = typer.Typer(
        name="caravel",
        help="Operate a Caravel job queue: migrations, workers, status, dead letters and pauses.",
        no_args_is_help=True,
        add_completion=False,
        context_settings=CONTEXT,
        rich_markup_mode=None,
    )
    for name, module, attribute, group in _TOP:
        if only is not None and name != only:
            continue
        found = getattr(importlib.import_module(module), attribute)
        if group:
            tree.add_typer(found, name=name)
        else:
            tree.command()(found)
    tree.callback()(_root)
    return tree


def _print_version(value: bool) -> None:
    if value:
        # Read from the installed distribution's metadata, only when asked for.
        from importlib.metadata import version

        typer.echo(f"caravel {version('caravel-queue')}")
        raise typer.Exit()


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


def command(only: str | None = None) -> Any:
    """The command tree as it runs (every command, or only the top-level one named ``only``):
    Click's plain help (it rewraps each paragraph to the terminal's width) and a metavar for
    every option that takes a value. Typer would show the Python annotation (``<list[str]>``,
    ``<bool>``) where a command gave none. (Typer's Click command: its own copy of Click in newer
    releases.)"""
    root = typer.main.get_command(_whole() if only is None else _tree(only))
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


_built: list[typer.Typer] = []


def _whole() -> typer.Typer:
    """The Typer app of every command, built once."""
    if not _built:
        _built.append(_tree())
    return _built[0]


def __getattr__(name: str) -> Any:
    """``app``: the Typer app of every command."""
    if name == "app":
        return _whole()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console-script entry point. Under ``--json`` a usage error Click finds (an unknown flag,
    a missing option, a value of the wrong type) is the JSON error document too, exit 2."""
    first = sys.argv[1] if len(sys.argv) > 1 else ""
    only = first if any(first == name for name, *_ in _TOP) else None
    if only != "worker":
        _run(only)
        return
    # A worker's start-up allocates what lives as long as the process (the libraries, the
    # application's modules): the collector's passes over it found next to nothing (a few
    # hundred objects) and cost a tenth of the start-up. The worker sets it all aside with
    # gc.freeze() and turns the collector back on before it starts processing.
    gc.disable()
    try:
        _run(only)
    finally:
        gc.enable()


def _run(only: str | None) -> None:
    if "--json" not in sys.argv[1:]:
        command(only).main(prog_name="caravel")
        return
    from caravel.cli.jsonout import error_document

    try:
        code = command(only).main(prog_name="caravel", standalone_mode=False)
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
