"""What a grid of worker settings says (bench/compare.py's ``GRIDS``, or the settings a report's
sweep tried): its knobs and their values, its middle, and whether the best setting sits on its
edge, where a wider grid might have found a better one. Pure functions: the page
(bench/page.py) reads the same things from a report."""

from __future__ import annotations

from typing import Any

Settings = dict[str, Any]


def knobs(grid: list[Settings]) -> dict[str, list[Any]]:
    """Each knob of ``grid`` and the values it takes, in the order they first appear."""
    found: dict[str, list[Any]] = {}
    for settings in grid:
        for knob, value in settings.items():
            values = found.setdefault(knob, [])
            if value not in values:
                values.append(value)
    return found


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def edges(
    best: Settings, grid: list[Settings], ceilings: Settings | None = None
) -> list[dict[str, Any]]:
    """The numeric knobs whose best value is the highest or the lowest the grid tried: a
    ``{"knob", "value", "side"}`` each. A lowest value of 1 (one process, one slot) is not an
    edge, as there is nothing lower to try, nor a highest value at the knob's ``ceilings`` (the
    most the library accepts); a knob the grid does not vary is not one either."""
    found = []
    for knob, values in knobs(grid).items():
        if knob not in best or len(values) < 2 or not all(map(_numeric, values)):
            continue
        value = best[knob]
        if value == max(values) and value != (ceilings or {}).get(knob):
            found.append({"knob": knob, "value": value, "side": "highest"})
        elif value == min(values) and value > 1:
            found.append({"knob": knob, "value": value, "side": "lowest"})
    return found


def middle(grid: list[Settings]) -> Settings:
    """The setting at the middle of each knob's values (the upper middle of an even count):
    what a comparison without a sweep uses, being neither the grid's cheapest nor its widest."""
    chosen = {knob: values[len(values) // 2] for knob, values in knobs(grid).items()}
    return chosen if chosen in grid else grid[len(grid) // 2]


def describe(settings: Settings) -> str:
    """``processes=2, batch=5,000``: a setting as the page and the sweep's warnings show it."""
    return ", ".join(
        f"{knob}={value:,}" if _numeric(value) else f"{knob}={value}"
        for knob, value in settings.items()
    )
