"""Read the fenced code blocks of the documentation and what each one's marker says.

The convention (tests/README.md, "The docs suite"), in short:

- the line before a fence may be an HTML comment: ``<!-- not run: KIND, why -->`` (never run)
  or ``<!-- run: OPTION ... -->`` (run, with options);
- a block whose preceding text line ends by naming a file (``Save this as `myapp/jobs.py`:``) is
  written to that file in the page's folder;
- ``python`` blocks without a file name and ``sh`` blocks are run; anything else must be marked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Why a block is not run. "fragment" python blocks are still compiled (top-level await allowed).
NOT_RUN_KINDS = frozenset({"output", "fragment", "template", "layout", "data", "long"})
#: The database servers a block may run on a second (third) time, each with a test id suffix.
SERVERS = ("postgresql", "mariadb")
RUN_OPTIONS = frozenset({*SERVERS, "background", "alone", "slow"})
SHELL = frozenset({"sh", "bash", "shell"})
RUNNABLE = SHELL | {"python"}

_FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)\s*$")
_MARKER = re.compile(r"^<!--\s*(not run|run)\s*:\s*(.*?)\s*-->$")
_FILE_NAME = re.compile(r"`([\w./-]+)`:\s*$")


class DocsConventionError(ValueError):
    """A marker the suite does not understand."""


@dataclass(frozen=True)
class Block:
    page: str  # relative to the checkout, e.g. "docs/tutorial.md"
    line: int  # the opening fence's line, 1-based
    lang: str
    text: str
    not_run: str | None = None  # the KIND of a `not run` marker
    options: frozenset[str] = frozenset()
    timeout: float = 60.0
    file_name: str | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.not_run is None and not self.problems and self.unrunnable is None

    @property
    def unrunnable(self) -> str | None:
        """Why an unmarked block cannot be run, if it cannot: such a block fails its test."""
        if self.not_run is None and self.file_name is None and self.lang not in RUNNABLE:
            return (
                f"{self.id}: a {self.lang or 'plain'} block the suite cannot run; name a file "
                "before it or mark it <!-- not run: KIND -->"
            )
        return None


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _marker(comment: str) -> tuple[str | None, frozenset[str], float, list[str]]:
    match = _MARKER.match(comment)
    if match is None:
        return None, frozenset(), 60.0, [f"unknown comment before a block: {comment!r}"]
    verb, rest = match.groups()
    if verb == "not run":
        kind = rest.split(",")[0].strip()
        if kind not in NOT_RUN_KINDS:
            problem = f"`not run` kind {kind!r} is not one of {sorted(NOT_RUN_KINDS)}"
            return None, frozenset(), 60.0, [problem]
        return kind, frozenset(), 60.0, []
    options: set[str] = set()
    timeout, problems = 60.0, []
    for word in rest.replace(",", " ").split():
        if word.startswith("timeout="):
            timeout = float(word.removeprefix("timeout="))
        elif word in RUN_OPTIONS:
            options.add(word)
        else:
            known = f"{sorted(RUN_OPTIONS)} or timeout=S"
            problems.append(f"`run` option {word!r} is not one of {known}")
    return None, frozenset(options), timeout, problems


def parse(path: Path) -> list[Block]:
    return parse_text(path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8"))


def parse_text(page: str, text: str) -> list[Block]:
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i].strip())
        if match is None:
            i += 1
            continue
        fence, lang = match.groups()
        end = i + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        before = [line.strip() for line in lines[:i] if line.strip()]
        not_run, options, timeout, problems = None, frozenset[str](), 60.0, list[str]()
        if before and before[-1].startswith("<!--"):
            not_run, options, timeout, problems = _marker(before[-1])
            before.pop()
        named = _FILE_NAME.search(before[-1]) if before else None
        blocks.append(
            Block(
                page=page,
                line=i + 1,
                lang=lang.lower(),
                text="\n".join(lines[i + 1 : end]) + "\n",
                not_run=not_run,
                options=options,
                timeout=timeout,
                file_name=named.group(1) if named else None,
                problems=tuple(problems),
            )
        )
        i = end + 1
    return blocks


def all_blocks() -> list[Block]:
    return [block for path in pages() for block in parse(path)]
