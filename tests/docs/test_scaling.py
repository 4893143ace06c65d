"""docs/explanation/scaling.md sizes its tiers only by figures that docs/performance.md or the
high-availability guide publish: every figure in its cost table is on the page that row links,
every figure in its summary's "measured" column is on one of the two, every section it links
exists, and the page is linked from the README and the docs index."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.blocks import ROOT

PAGE = (ROOT / "docs" / "explanation" / "scaling.md").read_text(encoding="utf-8")
SOURCES = {
    "../performance.md": (ROOT / "docs" / "performance.md").read_text(encoding="utf-8"),
    "../guides/high-availability.md": (ROOT / "docs" / "guides" / "high-availability.md").read_text(
        encoding="utf-8"
    ),
}
FIGURE = re.compile(r"\d[\d,]*(?:\.\d+)?")
PAGE_DIR = ROOT / "docs" / "explanation"
LINK = re.compile(r"\]\((\.\./[\w/.-]+\.md)(?:#([\w-]+))?\)")


def _table(heading: str) -> list[list[str]]:
    """The rows of the first table after ``heading``, as cells, without header and rule."""
    lines = PAGE.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows: list[list[str]] = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows[2:]


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def test_every_figure_of_the_cost_table_is_published_where_its_row_links() -> None:
    rows = _table("## What a job costs the server")
    assert len(rows) >= 6
    for _what, _database, cost, source in rows:
        link = LINK.search(source)
        assert link, source
        published = SOURCES[link.group(1)]
        missing = [figure for figure in FIGURE.findall(cost) if figure not in published]
        assert not missing, f"{cost!r}: not published in {link.group(1)}: {missing}"


def test_every_measured_figure_of_the_summary_is_published() -> None:
    rows = _table("## Summary")
    assert len(rows) == 3
    for row in rows:
        missing = [
            figure
            for figure in FIGURE.findall(row[-1])
            if not any(figure in text for text in SOURCES.values())
        ]
        assert not missing, f"{row[0]}: unpublished figures {missing}"


def test_every_linked_section_exists() -> None:
    pages = dict(SOURCES)
    for name in ("pgbouncer", "autoscaling", "workers"):
        pages[f"../guides/{name}.md"] = (ROOT / "docs" / "guides" / f"{name}.md").read_text(
            encoding="utf-8"
        )
    for link, anchor in LINK.findall(PAGE):
        if link not in pages:
            continue
        assert (PAGE_DIR / link).resolve().is_file(), link
        if anchor:
            headings = [
                _anchor(line.lstrip("#"))
                for line in pages[link].splitlines()
                if line.startswith("#")
            ]
            assert anchor in headings, f"{link}#{anchor}"


def test_the_page_is_linked_from_the_readme_and_the_docs_index() -> None:
    for page, link in (
        ("README.md", "docs/explanation/scaling.md"),
        ("docs/index.md", "explanation/scaling.md"),
    ):
        assert f"]({link})" in Path(ROOT / page).read_text(encoding="utf-8"), page
