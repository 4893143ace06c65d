"""The layers of ``src/caravel``: which package may import which (``docs/explanation/
architecture.md`` draws them). Read from the code's own import statements, function-level
imports included, so an upward import fails here before a reviewer has to spot it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:`` (imports for annotations only)."""
    found: list[ast.AST] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            pending.extend(node.orelse)
            continue
        found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = (
        _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    )
    found: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                prefix = ".".join(base)
                found.add(f"{prefix}.{node.module}" if node.module else prefix)
            elif node.module is not None:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


MODULES = {
    _module_name(path): _imports(path)
    for path in sorted((SRC / "caravel").rglob("*.py"))
    if "migrations" not in path.parts
}


def _inside(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _offenders(
    importer: tuple[str, ...], imported: tuple[str, ...], allowed: tuple[str, ...] = ()
) -> list[str]:
    return sorted(
        f"{module} imports {name}"
        for module, names in MODULES.items()
        if _inside(module, *importer) and not _inside(module, *allowed)
        for name in names
        if _inside(name, *imported)
    )


def test_the_layers_are_read_from_every_module() -> None:
    assert {"caravel.queue", "caravel.worker.service", "caravel.store.protocol"} <= set(MODULES)


def test_nothing_imports_the_command_line_but_the_command_line() -> None:
    # Django's management commands are the command line too, reached through manage.py: they
    # run `caravel worker` and `caravel status` themselves rather than a copy of them.
    allowed = ("caravel.cli", "caravel.__main__", "caravel.contrib.django.commands")
    assert _offenders(("caravel",), ("caravel.cli",), allowed=allowed) == []


def test_nothing_imports_an_integration_but_itself() -> None:
    assert _offenders(("caravel",), ("caravel.contrib",), allowed=("caravel.contrib",)) == []


def test_nothing_imports_the_dashboard_but_the_dashboard_and_its_command() -> None:
    assert _offenders(("caravel",), ("caravel.web",), allowed=("caravel.web", "caravel.cli")) == []


@pytest.mark.parametrize(
    "lower",
    [
        "caravel.store",
        "caravel.worker",
        "caravel.outbox",
        "caravel.queue",
        "caravel.inspector",
        "caravel.bridge",
    ],
)
def test_the_core_never_imports_an_audience_above_it(lower: str) -> None:
    assert _offenders((lower,), ("caravel.cli", "caravel.web", "caravel.testing")) == []


def test_the_store_imports_none_of_its_callers() -> None:
    callers = ("caravel.queue", "caravel.inspector", "caravel.worker", "caravel.outbox")
    assert _offenders(("caravel.store",), callers) == []


def test_the_facade_and_the_inspector_do_not_import_the_worker_or_the_outbox() -> None:
    assert (
        _offenders(("caravel.queue", "caravel.inspector"), ("caravel.worker", "caravel.outbox"))
        == []
    )


def test_only_the_command_line_imports_the_broker_bridges() -> None:
    allowed = ("caravel.bridge", "caravel.cli")
    assert _offenders(("caravel",), ("caravel.bridge",), allowed=allowed) == []


def test_telemetry_is_a_leaf() -> None:
    caravel_imports = {n for n in MODULES["caravel.telemetry"] if _inside(n, "caravel")}
    assert caravel_imports <= {"caravel.limits", "caravel.limits.MAX_TRACE_CONTEXT_LENGTH"}
    gauges_imports = {n for n in MODULES["caravel.gauges"] if _inside(n, "caravel")}
    assert gauges_imports <= {"caravel.telemetry", "caravel.telemetry.meter"}


def test_leaves_import_only_leaves() -> None:
    leaves = (
        "caravel.errors",
        "caravel.clock",
        "caravel.limits",
        "caravel.signals",
        "caravel.retry",
        "caravel.tags",
    )
    for leaf in leaves:
        inner = {n for n in MODULES[leaf] if _inside(n, "caravel")}
        assert all(_inside(n, *leaves) for n in inner), (leaf, inner)


@pytest.mark.parametrize(
    ("library", "homes"),
    [
        # The pytest plugin's throwaway databases are made and emptied on the driver directly.
        (
            "sqlalchemy",
            ("caravel.store", "caravel.migrate", "caravel.outbox", "caravel.testing.databases"),
        ),
        ("alembic", ("caravel.migrate",)),
        ("psycopg", ("caravel.store.postgresql", "caravel.testing.databases")),
        ("aiosqlite", ("caravel.store.sqlite",)),
        ("sqlite3", ("caravel.store.sqlite",)),
        ("starlette", ("caravel.web",)),
        ("jinja2", ("caravel.web",)),
        ("markupsafe", ("caravel.web",)),
        ("uvicorn", ("caravel.cli.dashboard",)),
        ("typer", ("caravel.cli",)),
        ("rich", ("caravel.cli",)),
        ("opentelemetry", ("caravel.telemetry", "caravel.gauges")),
        ("fastapi", ()),
        ("django", ("caravel.contrib.django",)),
        ("django_tasks", ("caravel.contrib.django",)),
        ("asgiref", ("caravel.contrib.django",)),
        ("pytest", ("caravel.testing.plugin",)),
        ("aio_pika", ("caravel.bridge.rabbitmq",)),
        ("aiormq", ("caravel.bridge.rabbitmq",)),
        ("yarl", ("caravel.bridge.rabbitmq",)),
        ("nats", ("caravel.bridge.nats",)),
    ],
)
def test_each_third_party_library_is_imported_only_where_it_belongs(
    library: str, homes: tuple[str, ...]
) -> None:
    assert _offenders(("caravel",), (library,), allowed=homes) == []
