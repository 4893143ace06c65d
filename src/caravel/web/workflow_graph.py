"""A workflow's graph drawn on the server as inline SVG: no script, no layout library.

Steps stand in columns by layer (:attr:`~caravel.workflows.nodes.StepNode.layer`: a step one
column right of the last step it runs after), in the order they were added, reordered once by
the rows of the steps they run after so edges cross less. Each node is a box coloured by its
state through a CSS class (the page's stylesheet, and its dark scheme, decides the colours),
says its state or a group's counts in words, and links to its row in the steps table below
the graph, which says the same for screen readers and has the links to act on. A group of
``add_many`` members is one node, so 10,000 members draw one box.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

from caravel.workflows.nodes import StepNode, node_words

__all__ = ["MAX_DRAWN", "graph_svg", "node_anchor"]

#: The most nodes drawn; a workflow with more step names is shown as its table alone.
MAX_DRAWN = 300

_BOX_W, _BOX_H = 200.0, 58.0
_GAP_X, _GAP_Y = 56.0, 18.0
_PAD = 8.0
#: Characters of a step name that fit a box; a longer name is cut, and whole in its tooltip.
_NAME_FITS = 24


def node_anchor(step: str) -> str:
    """The id of a step's row in the steps table (step names are ``[A-Za-z0-9_.:-]``, all
    valid in an id)."""
    return f"step-{step}"


def _fmt(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _rows(nodes: Sequence[StepNode]) -> dict[str, tuple[int, int]]:
    """Each node's (column, row): in a column, nodes ordered by the mean row of the nodes they
    run after (one pass, left to right), ties in the order they were added."""
    columns: dict[int, list[StepNode]] = {}
    for node in nodes:
        columns.setdefault(node.layer, []).append(node)
    placed: dict[str, tuple[int, int]] = {}
    for layer in sorted(columns):
        column = columns[layer]

        def weight(item: tuple[int, StepNode]) -> tuple[float, int]:
            order, node = item
            rows = [placed[name][1] for name in node.after if name in placed]
            return (sum(rows) / len(rows) if rows else float(order), order)

        ranked = sorted(enumerate(column), key=weight)
        for row, (_, node) in enumerate(ranked):
            placed[node.step] = (layer, row)
    return placed


def graph_svg(nodes: Sequence[StepNode], *, href: str = "") -> Markup:
    """The graph of ``nodes`` as an ``<svg role="img">`` with a title and a description;
    each node links to ``{href}#step-{name}``. Empty when there are more than
    :data:`MAX_DRAWN` nodes (or none)."""
    if not nodes or len(nodes) > MAX_DRAWN:
        return Markup("")
    places = _rows(nodes)
    columns = 1 + max(col for col, _ in places.values())
    rows = 1 + max(row for _, row in places.values())
    width = 2 * _PAD + columns * _BOX_W + (columns - 1) * _GAP_X
    height = 2 * _PAD + rows * _BOX_H + (rows - 1) * _GAP_Y

    def corner(step: str) -> tuple[float, float]:
        col, row = places[step]
        return _PAD + col * (_BOX_W + _GAP_X), _PAD + row * (_BOX_H + _GAP_Y)

    states = {node.step: node.state for node in nodes}
    waiting = sum(1 for node in nodes if node.reasons)
    description = (
        f"{len(nodes)} steps in {columns} columns, each to the right of the steps it runs "
        f"after; {waiting} not running yet. The table below lists the same steps."
    )
    parts = [
        f'<svg class="workflow-graph" viewBox="0 0 {_fmt(width)} {_fmt(height)}" '
        f'width="{_fmt(width)}" height="{_fmt(height)}" role="img" '
        'aria-labelledby="graph-t" aria-describedby="graph-d" focusable="false">',
        '<title id="graph-t">The workflow\'s steps and their dependencies</title>',
        f'<desc id="graph-d">{escape(description)}</desc>',
        '<g class="edges">',
    ]
    for node in nodes:
        x2, y2 = corner(node.step)
        for name in node.after:
            if name not in places:
                continue
            x1, y1 = corner(name)
            start_x, start_y = x1 + _BOX_W, y1 + _BOX_H / 2
            end_x, end_y = x2, y2 + _BOX_H / 2
            bend = (end_x - start_x) / 2
            css = "edge" if states[name] != "completed" else "edge edge-done"
            parts.append(
                f'<path class="{css}" data-from="{escape(name)}" data-to="{escape(node.step)}" '
                f'd="M{_fmt(start_x)},{_fmt(start_y)} C{_fmt(start_x + bend)},{_fmt(start_y)} '
                f'{_fmt(end_x - bend)},{_fmt(end_y)} {_fmt(end_x)},{_fmt(end_y)}"/>'
            )
    parts.append("</g>")
    for node in nodes:
        parts.append(_box(node, *corner(node.step), href))
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 (every value above is escaped or a number)


def _box(node: StepNode, x: float, y: float, href: str) -> str:
    name = node.step if len(node.step) <= _NAME_FITS else node.step[: _NAME_FITS - 1] + "\u2026"
    title = node.step if not node.group else f"{node.step} (a group of {node.members:,})"
    tip = "; ".join([title, node_words(node), *node.reasons])
    label = name if not node.group else f"{name} \u00d7{node.members:,}"
    link = f"{href}#{node_anchor(node.step)}"
    text_x = x + 10
    return (
        f'<a class="node node-{escape(node.state)}" href="{escape(link)}" '
        f'data-step="{escape(node.step)}" data-state="{escape(node.state)}">'
        f"<title>{escape(tip)}</title>"
        f'<rect x="{_fmt(x)}" y="{_fmt(y)}" width="{_fmt(_BOX_W)}" height="{_fmt(_BOX_H)}" '
        'rx="6"/>'
        f'<text class="node-name" x="{_fmt(text_x)}" y="{_fmt(y + 22)}">{escape(label)}</text>'
        f'<text class="node-state" x="{_fmt(text_x)}" y="{_fmt(y + 42)}">'
        f"{escape(_fit(node_words(node)))}</text>"
        "</a>"
    )


def _fit(words: str) -> str:
    """A state line that fits a box (about 30 characters), cut with an ellipsis."""
    return words if len(words) <= 30 else words[:29] + "\u2026"
