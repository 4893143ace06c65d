"""The dashboard is an optional extra: nothing in the core library imports Starlette, Jinja2,
uvicorn or ``caravel.web``, and the command line loads them only when ``caravel dashboard``
runs."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src" / "caravel"
WEB_ONLY = ("starlette", "jinja2", "uvicorn", "markupsafe")


def _imports(tree: ast.AST, *, top_level_only: bool) -> set[str]:
    nodes = tree.body if top_level_only and isinstance(tree, ast.Module) else ast.walk(tree)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def _is_web(name: str) -> bool:
    return (
        name.split(".")[0] in WEB_ONLY or name == "caravel.web" or name.startswith("caravel.web.")
    )


def test_no_core_module_imports_the_web_stack() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative.startswith("web/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # The commands that serve HTTP (the dashboard, `metrics --serve`) import the web stack
        # inside their functions, never at import time.
        top_only = relative in ("cli/dashboard.py", "cli/metrics.py")
        bad = sorted(n for n in _imports(tree, top_level_only=top_only) if _is_web(n))
        if bad:
            offenders.append(f"{relative}: {', '.join(bad)}")
    assert offenders == []


def test_importing_the_library_and_its_command_line_loads_no_web_module() -> None:
    # (markupsafe is left out here: Alembic's templates need it too.)
    web = ("starlette", "jinja2", "uvicorn")
    code = (
        "import sys, caravel, caravel.cli.main, caravel.testing, caravel.outbox;"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {web!r}"
        " or m.startswith('caravel.web')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
