"""The counter API's ``from``/``to`` parsing, as a pure function: every string either becomes a
window that the responses can show, or a :class:`TimeRangeError` naming the bound (never an
overflow deep in ``datetime``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from caravel_samples.backend.timerange import (
    UTC_PATTERN,
    TimeRangeError,
    parse_utc,
    resolve,
    to_datetime,
)
from hypothesis import example, given
from hypothesis import strategies as st

NOW = int(datetime(2026, 9, 28, tzinfo=UTC).timestamp() * 1000)

#: Strings the query pattern lets through (the endpoint checks the pattern first).
bounds = st.none() | st.from_regex(UTC_PATTERN, fullmatch=True) | st.text(max_size=40)


@pytest.mark.parametrize(
    ("start", "end", "named"),
    [
        (None, "0001-01-01T00:00:00Z", "to"),
        (None, "9999-12-31T23:59:59.999999999Z", "to"),
        ("0001-01-01T00:00:00Z", None, "from"),
        ("9999-12-31T23:59:59Z", None, "from"),
        ("1969-12-31T23:59:59.999Z", "1970-01-01T00:00:01Z", "from"),
    ],
)
def test_instants_out_of_range_name_their_bound(
    start: str | None, end: str | None, named: str
) -> None:
    with pytest.raises(TimeRangeError) as caught:
        resolve(start, end, now=NOW)
    assert str(caught.value).startswith(f"{named} must be from 1970-01-01T00:00:00Z")


def test_the_edges_of_the_range() -> None:
    assert parse_utc("1970-01-01T00:00:00Z", "from") == 0
    window = resolve("9998-12-31T00:00:00Z", "9998-12-31T23:59:59.999999999Z", now=NOW)
    assert to_datetime(window.end_ms) == datetime(9999, 1, 1, tzinfo=UTC)


@given(bounds, bounds)
@example("0001-01-01T00:00:00Z", None)
@example(None, "9999-12-31T23:59:59.999999999Z")
@example("9999-12-31T23:59:59.999999999+00:00", "9999-12-31T23:59:59.999999999Z")
def test_any_bounds_give_a_window_or_a_time_range_error(start: str | None, end: str | None) -> None:
    try:
        window = resolve(start, end, now=NOW)
    except TimeRangeError as exc:
        named = str(exc).split(" ", 1)[0]
    else:
        named = None
    if named is not None:
        assert named in ("from", "to", "the")  # "the window from..to must be ..."
        return
    assert 0 < window.end_ms - window.start_ms <= 31 * 24 * 3600 * 1000
    to_datetime(window.start_ms), to_datetime(window.end_ms)  # both can be shown
