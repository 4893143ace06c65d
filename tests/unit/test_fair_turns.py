"""The pure rules of fair dispatch's turns: where a round starts (the cursor) and how a claim
moves it (:mod:`caravel.flow.fairness`). The stores' claims are checked against the same rules
by the conformance suite; here, the rules alone, over any keys."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from caravel.flow.fairness import comes_after, fair_order, next_cursor, share

keys = st.text(alphabet="abcdefgh", min_size=1, max_size=3)


def test_a_round_starts_after_the_cursor_and_wraps_round() -> None:
    due = [(False, key) for key in ("a", "a", "b", "c", "c")]
    assert fair_order(due, {}, {}, None) == [0, 2, 3, 1, 4]
    assert fair_order(due, {}, {}, "a") == [2, 3, 0, 4, 1]
    assert fair_order(due, {}, {}, "c") == [0, 2, 3, 1, 4]
    # Expired leases first in their own order, whatever the cursor.
    assert fair_order([(False, "a"), (True, "c"), (True, "a")], {}, {}, "b") == [1, 2, 0]


def test_the_cursor_moves_to_the_key_served_last_in_the_round() -> None:
    assert next_cursor(None, []) is None
    assert next_cursor("b", []) == "b"
    assert next_cursor(None, ["b", "a"]) == "b"
    assert next_cursor("b", ["c", "d"]) == "d"
    # The round wrapped past the last key: the last served is the greatest at or before "b".
    assert next_cursor("b", ["c", "d", "a"]) == "a"
    assert next_cursor("b", ["b", "c"]) == "b"


@given(st.sets(keys, min_size=1, max_size=8), st.none() | keys, st.integers(1, 30))
def test_claims_of_one_serve_every_key_in_turn(
    waiting: set[str], cursor: str | None, claims: int
) -> None:
    """Keys that always have due work and never have a job running when a claim is made (a
    worker of one slot): each run of ``len(keys)`` claims serves every key exactly once."""
    served: list[str] = []
    for _ in range(claims):
        due = [(False, key) for key in sorted(waiting) for _ in range(2)]
        (first, *_) = fair_order(due, {}, {}, cursor)
        key = due[first][1]
        assert comes_after(key, cursor) or not any(comes_after(k, cursor) for k in waiting)
        served.append(key)
        cursor = next_cursor(cursor, [key])
    for start in range(0, len(served) - len(waiting) + 1):
        window = Counter(served[start : start + len(waiting)])
        assert set(window) == waiting


def test_a_claim_reads_a_small_multiple_of_its_even_share_of_each_key() -> None:
    assert share(500, 1_000, {}) == 2  # one job each rounded up, doubled
    assert share(500, 100, {}) == 10
    assert share(500, 1, {}) == 1_000  # a lone key: the whole batch, and room
    assert share(10, 3, {"a": 3}) == 24  # the heaviest weight takes its rounds
    assert share(10, 0, {}) == 20
