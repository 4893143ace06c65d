"""docs/explanation/comparison.md claims nothing that a test or the bench does not show: every
Caravel cell names its evidence, every named test exists, every figure is one that
docs/performance.md publishes, and every peer cell links its documentation (or says it has
nothing to cite)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.blocks import ROOT

PAGE = ROOT / "docs" / "explanation" / "comparison.md"
PERFORMANCE = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
TEST_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")
MARK = re.compile(r"\[(C\d+)\]")
FIGURE = re.compile(r"\d[\d,]*(?:\.\d+)?")
#: What a peer's cell may say without a link.
NOTHING_TO_CITE = {"—", "not measured"}


def _tables(text: str) -> list[list[list[str]]]:
    """Each Markdown table of the page as rows of cells, without the header's rule."""
    tables: list[list[list[str]]] = []
    rows: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
            if not all(set(cell) <= set("-: ") for cell in cells):
                rows.append(cells)
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


TEXT = PAGE.read_text(encoding="utf-8")
SECTIONS = _sections(TEXT)
EVIDENCE = SECTIONS["Caravel's evidence"]


def test_every_named_test_exists() -> None:
    named = TEST_REFERENCE.findall(TEXT)
    assert len(named) >= 12
    missing = []
    for file, test in named:
        path = ROOT / file
        source = path.read_text(encoding="utf-8") if path.is_file() else ""
        if not re.search(rf"^(async )?def {test}\(", source, flags=re.MULTILINE):
            missing.append(f"{file}::{test}")
    assert not missing, f"comparison.md names tests that do not exist: {missing}"


def test_every_caravel_cell_names_evidence_that_is_listed() -> None:
    listed = {row[0]: row[1] for row in _tables(EVIDENCE)[0][1:]}
    assert all(TEST_REFERENCE.search(tests) for tests in listed.values())
    used = set()
    for section in ("Guarantees", "Features"):
        (table,) = _tables(SECTIONS[section])
        assert table[0][1] == "Caravel"
        for row in table[1:]:
            marks = MARK.findall(row[1])
            assert marks, f"{section}, {row[0]!r}: Caravel's cell names no evidence"
            used.update(marks)
    assert used == set(listed)


def test_every_peer_cell_links_its_documentation_or_says_there_is_none() -> None:
    for section in ("Guarantees", "Features"):
        (table,) = _tables(SECTIONS[section])
        for row in table[1:]:
            for peer, cell in zip(table[0][2:], row[2:], strict=True):
                cited = re.search(r"\]\[[\w-]+\]|\]\(https?://", cell)
                assert cited or cell in NOTHING_TO_CITE, f"{row[0]!r}, {peer}: {cell!r}"
    links = dict(re.findall(r"^\[([\w-]+)\]: (\S+)$", TEXT, flags=re.MULTILINE))
    used = set(re.findall(r"\]\[([\w-]+)\]", TEXT)) | set(MARK.findall(TEXT))
    assert used <= set(links), f"undefined links: {used - set(links)}"


def test_every_figure_is_one_the_performance_page_publishes() -> None:
    section = SECTIONS["Figures from `make bench`"]
    (table,) = _tables(section)
    measured = table[0][1:6]
    assert measured == [
        "Caravel",
        "pgqueuer 1.6",
        "oban 0.7",
        "procrastinate 3.10",
        "graphile-worker 0.17",
    ]
    figures = []
    for row in table[1:]:
        figures += [figure for cell in row[1:6] for figure in FIGURE.findall(cell)]
        assert row[6:] == ["not measured"] * 3, row[0]
    # The paragraph after the table quotes Caravel's SQLite drain from an earlier run.
    after = section.split("\n\n")[3]
    assert after.startswith("Caravel's enqueues")
    figures += FIGURE.findall(after.split("(run J, Caravel alone")[0])
    assert len(figures) > 30
    unpublished = [figure for figure in figures if figure not in PERFORMANCE]
    assert not unpublished, f"figures docs/performance.md does not publish: {unpublished}"
    assert "(../performance.md#against-the-peers-each-at-its-best-run-v-2026-12-06)" in section
    assert "## Against the peers, each at its best (run V, 2026-12-06)" in PERFORMANCE
    assert "### Against the peers, each at its best (run J, 2026-12-01)" in PERFORMANCE


def test_the_page_is_linked_from_the_readme_and_the_docs_index() -> None:
    for page, link in (
        ("README.md", "docs/explanation/comparison.md"),
        ("docs/index.md", "explanation/comparison.md"),
    ):
        assert f"]({link})" in Path(ROOT / page).read_text(encoding="utf-8"), page
