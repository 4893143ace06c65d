"""Every install line of README.md and docs/ is one the docs suite runs as written: in a block
marked `alone` (a folder of its own), into a virtual environment that block makes, installing
``$CARAVEL_PACKAGE`` (docs/install.md). So no page tells a reader to install a name that no
package index serves, the suite never installs into its own environment, and what to install
is said in one place."""

from __future__ import annotations

import re
from collections.abc import Iterator

from tests.docs.blocks import ROOT, Block, pages, parse_text

#: A command that installs something (`pip install` with an argument), or the distribution's
#: name with an extra, which is how an install line names it.
INSTALL = re.compile(r"\bpip install\s+[^`\s]|caravel-queue\[")


def install_lines(page: str, text: str) -> Iterator[tuple[int, str, Block | None]]:
    """Each line that installs, with the block it is in (None: prose)."""
    blocks = parse_text(page, text)
    for number, line in enumerate(text.splitlines(), start=1):
        if INSTALL.search(line):
            inside = (b for b in blocks if b.line < number <= b.line + b.text.count("\n") + 1)
            yield number, line, next(inside, None)


def problem(line: str, block: Block | None) -> str | None:
    if block is None:
        return "an install line in prose; make it a block the docs suite runs"
    if not block.runnable:
        return "an install line in a block the docs suite does not run"
    if "alone" not in block.options:
        return "an install block must be marked `<!-- run: alone ... -->`"
    if "python -m venv" not in block.text:
        return "an install block must make its own virtual environment first"
    if "pip install" in line and "CARAVEL_PACKAGE" not in line:
        return 'install "$CARAVEL_PACKAGE" (docs/install.md), not a name of its own'
    return None


def problems(page: str, text: str) -> list[str]:
    found = []
    for number, line, block in install_lines(page, text):
        why = problem(line, block)
        if why is not None:
            found.append(f"{page}:{number}: {why}")
    return found


def test_every_install_line_is_run_as_written() -> None:
    found = []
    for path in pages():
        page = path.relative_to(ROOT).as_posix()
        found += problems(page, path.read_text(encoding="utf-8"))
    assert not found, "\n".join(found)


def test_the_pages_that_install_do_so_in_a_block_the_suite_runs() -> None:
    installing = set()
    for path in pages():
        page = path.relative_to(ROOT).as_posix()
        if any(block for _, _, block in install_lines(page, path.read_text(encoding="utf-8"))):
            installing.add(page)
    assert {
        "README.md",
        "docs/install.md",
        "docs/tutorial.md",
        "docs/guides/dashboard.md",
        "docs/guides/django.md",
        "docs/guides/testing.md",
        "docs/guides/workers.md",
    } <= installing


PAGE = """# A page

Run `pip install "caravel-queue[web]"` first.

<!-- not run: template -->
```sh
pip install "$CARAVEL_PACKAGE[web]"
```

```sh
python -m venv .venv && . .venv/bin/activate
pip install "$CARAVEL_PACKAGE"
```

<!-- run: alone slow -->
```sh
pip install "$CARAVEL_PACKAGE"
```

<!-- run: alone slow -->
```sh
python -m venv .venv && . .venv/bin/activate
pip install caravel-queue
```

<!-- run: alone slow -->
```sh
python -m venv .venv && . .venv/bin/activate
pip install "${CARAVEL_PACKAGE:?see docs/install.md}[django]"
```

Phrases such as `pip install` alone are not install lines.
"""


def test_the_check_finds_each_kind_of_install_line_the_suite_would_not_run_as_written() -> None:
    assert problems("page.md", PAGE) == [
        "page.md:3: an install line in prose; make it a block the docs suite runs",
        "page.md:7: an install line in a block the docs suite does not run",
        "page.md:12: an install block must be marked `<!-- run: alone ... -->`",
        "page.md:17: an install block must make its own virtual environment first",
        'page.md:23: install "$CARAVEL_PACKAGE" (docs/install.md), not a name of its own',
    ]
