"""A block the docs suite runs is one a reader copies as it is, so whatever in it the reader must
replace (a handler's body, a password) says so: a ``placeholder:`` comment on its line, or a
comment in the block of the form ``placeholder: "the text"`` naming it. Blocks marked
``not run: template`` or ``fragment`` are placeholders throughout and are not checked."""

from __future__ import annotations

import ast
import re

from tests.docs.blocks import SHELL, Block, all_blocks, parse_text

#: Text that stands for something of the reader's: <a description>, "your password here",
#: YOUR_TOKEN, changeme.
_WORDS = re.compile(r"<[A-Za-z][\w '-]*>|\byour [\w ]*here\b|\bYOUR_[A-Z_]+|\bchangeme\b", re.I)
_MARK = "placeholder:"


def _ellipsis_lines(block: Block) -> set[int]:
    """Lines holding a bare ``...`` statement: a body left for the reader to write."""
    tree = ast.parse(block.text)
    return {
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and node.value.value is Ellipsis
    }


def unmarked(block: Block) -> list[str]:
    if not block.runnable:
        return []
    python = block.lang == "python" or (block.file_name or "").endswith(".py")
    if not python and block.lang not in SHELL:
        return []
    lines = block.text.splitlines()
    named = " ".join(line for line in lines if _MARK in line)  # the comments that name one
    found = []
    for number in sorted(_ellipsis_lines(block) if python else set()):
        if _MARK not in lines[number - 1]:
            found.append(f"{block.id}+{number}: `...` is left for the reader; mark it")
    for number, line in enumerate(lines, start=1):
        for match in _WORDS.finditer(line):
            if _MARK not in line and f'"{match.group()}"' not in named:
                found.append(f"{block.id}+{number}: {match.group()!r} is left for the reader")
    return found


def test_every_placeholder_in_a_block_that_runs_is_marked() -> None:
    found = [problem for block in all_blocks() for problem in unmarked(block)]
    assert not found, "\n".join(found)


PAGE = """# A page

```python
def handler() -> None:
    ...
```

```python
def handler() -> None:
    ...  # placeholder: your work
```

```sh
login --password 'your password here' --tenant <the caller's tenant>
```

```sh
# placeholder: "your password here" is the one you chose
login --password 'your password here'
```

<!-- not run: template -->
```sh
deploy --to <your host>
```
"""


def test_the_check_finds_unmarked_placeholders_and_accepts_marked_ones() -> None:
    assert [problem for block in parse_text("page.md", PAGE) for problem in unmarked(block)] == [
        "page.md:3+2: `...` is left for the reader; mark it",
        "page.md:13+1: 'your password here' is left for the reader",
        'page.md:13+1: "<the caller\'s tenant>" is left for the reader',
    ]
