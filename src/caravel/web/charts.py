"""Small bar charts rendered on the server as inline SVG: no script, no external library.

Every chart is an ``<svg role="img">`` with a ``<title>`` and a ``<desc>`` that say in words what
it shows, and every bar has a ``<title>`` (a tooltip) with its time range and count. Colours come
from CSS classes, so the page's stylesheet (and its dark scheme) decides them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from markupsafe import Markup, escape

__all__ = ["Series", "bar_chart", "sparkline"]


@dataclass(frozen=True, slots=True)
class Series:
    """Counts per time bucket: ``starts[i]`` is when bucket ``i`` begins."""

    starts: Sequence[datetime]
    values: Sequence[int]
    bucket_minutes: int

    @property
    def total(self) -> int:
        return sum(self.values)

    @property
    def peak(self) -> int:
        return max(self.values, default=0)

    def span(self, index: int) -> str:
        start = self.starts[index]
        end = start + timedelta(minutes=self.bucket_minutes)
        return f"{start:%H:%M}\u2013{end:%H:%M} UTC"


def _fmt(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _bars(
    series: Series, noun: str, *, left: float, top: float, width: float, height: float
) -> list[str]:
    count = max(len(series.values), 1)
    slot = width / count
    gap = min(2.0, slot * 0.2)
    peak = max(series.peak, 1)
    parts: list[str] = []
    for index, value in enumerate(series.values):
        bar = height * value / peak
        if value == 0:
            bar = 1.0  # a hairline, so an empty bucket is visibly zero, not missing
        x = left + index * slot + gap / 2
        y = top + height - bar
        css = "bar" if value else "bar bar-zero"
        tip = escape(f"{series.span(index)}: {value} {noun}")
        parts.append(
            f'<rect class="{css}" x="{_fmt(x)}" y="{_fmt(y)}" width="{_fmt(slot - gap)}" '
            f'height="{_fmt(bar)}"><title>{tip}</title></rect>'
        )
    return parts


def bar_chart(series: Series, *, ident: str, title: str, noun: str, tone: str) -> Markup:
    """A labelled bar chart (about 360 x 120 px, scales with its container).

    ``ident`` must be unique on the page; ``title`` says what is counted ("Completed"), ``noun``
    how one count reads in a tooltip ("completed"), ``tone`` picks the CSS colour class
    (``ok`` or ``bad``).
    """
    width, height = 360.0, 120.0
    left, top, right, bottom = 34.0, 8.0, 6.0, 22.0
    plot_w, plot_h = width - left - right, height - top - bottom
    description = (
        f"{series.total} {noun} in the last hour, in {series.bucket_minutes}-minute buckets; "
        f"the busiest bucket had {series.peak}."
    )
    first = f"{series.starts[0]:%H:%M}" if series.starts else ""
    last = f"{series.starts[-1]:%H:%M}" if series.starts else ""
    parts = [
        f'<svg class="chart tone-{escape(tone)}" viewBox="0 0 {_fmt(width)} {_fmt(height)}" '
        f'role="img" aria-labelledby="{escape(ident)}-t" aria-describedby="{escape(ident)}-d" '
        f'preserveAspectRatio="xMidYMid meet" focusable="false">',
        f'<title id="{escape(ident)}-t">{escape(title)}</title>',
        f'<desc id="{escape(ident)}-d">{escape(description)}</desc>',
        f'<line class="axis" x1="{_fmt(left)}" y1="{_fmt(top + plot_h)}" '
        f'x2="{_fmt(width - right)}" y2="{_fmt(top + plot_h)}"/>',
        f'<line class="grid" x1="{_fmt(left)}" y1="{_fmt(top)}" x2="{_fmt(width - right)}" '
        f'y2="{_fmt(top)}"/>',
        f'<text class="label" x="{_fmt(left - 4)}" y="{_fmt(top + 4)}" '
        f'text-anchor="end">{series.peak}</text>',
        f'<text class="label" x="{_fmt(left - 4)}" y="{_fmt(top + plot_h)}" '
        f'text-anchor="end">0</text>',
        f'<text class="label" x="{_fmt(left)}" y="{_fmt(height - 6)}">{escape(first)}</text>',
        f'<text class="label" x="{_fmt(width - right)}" y="{_fmt(height - 6)}" '
        f'text-anchor="end">{escape(last)}</text>',
        *_bars(series, noun, left=left, top=top, width=plot_w, height=plot_h),
        "</svg>",
    ]
    return Markup("".join(parts))  # noqa: S704 (every value above is escaped or a number)


def sparkline(series: Series, *, label: str, noun: str, tone: str) -> Markup:
    """A tiny bar chart for a table cell (96 x 24 px); ``label`` is its accessible name."""
    width, height = 96.0, 24.0
    name = f"{label}: {series.total} {noun} in the last hour (busiest bucket {series.peak})"
    parts = [
        f'<svg class="spark tone-{escape(tone)}" viewBox="0 0 {_fmt(width)} {_fmt(height)}" '
        f'width="{_fmt(width)}" height="{_fmt(height)}" role="img" '
        f'aria-label="{escape(name)}" focusable="false">',
        f"<title>{escape(name)}</title>",
        *_bars(series, noun, left=0, top=1, width=width, height=height - 2),
        "</svg>",
    ]
    return Markup("".join(parts))  # noqa: S704 (every value above is escaped or a number)
