"""The pending-key options, as ``DispatchOptions`` checks them, and what a prepared job carries."""

from __future__ import annotations

from datetime import timedelta

import pytest

from caravel import DispatchOptions
from caravel.errors import ValidationError
from caravel.limits import MAX_KEY_LENGTH
from caravel.options import QueueOptions
from caravel.preparation import prepare_job
from tests.support import Add, make_registry


def test_the_defaults_have_no_pending_rule() -> None:
    given = DispatchOptions(queue="q")
    assert (given.pending_key, given.on_pending) == (None, "keep")
    assert given.max_debounce == timedelta(minutes=10)


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"pending_key": ""}, "pending_key", "blank"),
        ({"pending_key": "x" * (MAX_KEY_LENGTH + 1)}, "pending_key", "at most"),
        ({"pending_key": "a\nb"}, "pending_key", "control"),
        ({"pending_key": 7}, "pending_key", "string"),
        ({"pending_key": "k", "idempotency_key": "i"}, "pending_key", "idempotency_key"),
        ({"on_pending": "replace"}, "on_pending", "needs a pending_key"),
        ({"max_debounce": timedelta(minutes=1)}, "max_debounce", "needs a pending_key"),
        ({"pending_key": "k", "on_pending": "latest"}, "on_pending", "'keep' or 'replace'"),
        ({"pending_key": "k", "max_debounce": timedelta(0)}, "max_debounce", "30 days"),
        ({"pending_key": "k", "max_debounce": timedelta(days=31)}, "max_debounce", "30 days"),
        ({"pending_key": "k", "max_debounce": 60}, "max_debounce", "timedelta"),
    ],
)
def test_a_pending_option_outside_its_rule_is_refused_naming_the_field(
    fields: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        DispatchOptions(queue="q", **fields)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert words in caught.value.rule
    assert "x" * 20 not in str(caught.value)  # the value is never echoed


def test_a_prepared_job_carries_its_key_and_debounce() -> None:
    registry, options = make_registry(), QueueOptions()
    kept = prepare_job(registry, options, Add(1), DispatchOptions(queue="q", pending_key="k"), 5)
    assert (kept.pending_key, kept.debounce_ms) == ("k", None)
    dispatch = DispatchOptions(
        queue="q",
        pending_key="k",
        on_pending="replace",
        max_debounce=timedelta(seconds=90, microseconds=1),
    )
    replaced = prepare_job(registry, options, Add(1), dispatch, 5)
    assert (replaced.pending_key, replaced.debounce_ms) == ("k", 90_000)
    plain = prepare_job(registry, options, Add(1), DispatchOptions(queue="q"), 5)
    assert (plain.pending_key, plain.debounce_ms) == (None, None)
