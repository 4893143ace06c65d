"""``ctx.progress`` and ``ctx.set_meta``: the rules of each value, the JSON they keep, and how a
report tells its worker (once, until the worker takes what is pending)."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from caravel import JobProgress, ValidationError
from caravel.limits import MAX_META_BYTES
from caravel.progress import (
    MAX_PROGRESS_NUMBER,
    ProgressReport,
    meta_from,
    progress_from,
    progress_text,
)
from caravel.testing import perform
from tests.support import Add, registry_for


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((0,), {"done": 0, "total": None, "note": None}),
        ((3, 10, "resizing"), {"done": 3, "total": 10, "note": "resizing"}),
        ((2.5, 4.0), {"done": 2.5, "total": 4.0, "note": None}),
        ((10, 10, ""), {"done": 10, "total": 10, "note": ""}),
        ((MAX_PROGRESS_NUMBER, MAX_PROGRESS_NUMBER), {"done": 2**53, "total": 2**53, "note": None}),
        ((1, None, "é" * 200), {"done": 1, "total": None, "note": "é" * 200}),
    ],
)
def test_good_reports_are_kept_as_json(args: tuple[Any, ...], expected: dict[str, Any]) -> None:
    text = progress_text(*args)
    assert json.loads(text) == expected
    assert len(text.encode()) <= 1024


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((-1,), "done"),
        ((-0.5, 1), "done"),
        ((float("nan"),), "done"),
        ((float("inf"), None), "done"),
        ((True,), "done"),
        (("3",), "done"),
        ((None,), "done"),
        ((MAX_PROGRESS_NUMBER + 1,), "done"),
        ((1, 0), "total"),
        ((0, -3), "total"),
        ((1, float("nan")), "total"),
        ((1, float("-inf")), "total"),
        ((1, False), "total"),
        ((5, 4), "done"),
        ((1, 2, 3), "note"),
        ((1, 2, "x" * 201), "note"),
        ((1, 2, "tab\there"), "note"),
        ((1, 2, "\x9b"), "note"),
        ((1, 2, "\ud800"), "note"),
    ],
)
def test_bad_reports_name_their_field(args: tuple[Any, ...], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        progress_text(*args)
    assert str(caught.value) == f"{field}: {caught.value.rule}"  # the rule, never the value


def test_metadata_is_one_object_of_the_keys_set() -> None:
    report = ProgressReport()
    report.set_meta("rows", 12)
    report.set_meta("source", {"bucket": "b", "keys": ["a", "é"]})
    report.set_meta("rows", 13)  # set again: replaced, in its place
    _, meta = report.take()
    assert meta is not None
    assert list(json.loads(meta).items()) == [
        ("rows", 13),
        ("source", {"bucket": "b", "keys": ["a", "é"]}),
    ]


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("", 1, "key"),
        ("   ", 1, "key"),
        ("k" * 129, 1, "key"),
        ("line\nbreak", 1, "key"),
        (7, 1, "key"),
        ("k", object(), "value"),
        ("k", {1, 2}, "value"),
        ("k", float("nan"), "value"),
        ("k", [float("inf")], "value"),
        ("k", "x" * MAX_META_BYTES, "value"),
    ],
)
def test_bad_metadata_names_its_field_and_changes_nothing(key: Any, value: Any, field: str) -> None:
    report = ProgressReport()
    report.set_meta("kept", True)
    with pytest.raises(ValidationError) as caught:
        report.set_meta(key, value)
    assert caught.value.field == field
    assert report.take() == (None, '{"kept":true}')


def test_the_whole_object_is_bounded_not_each_value() -> None:
    report = ProgressReport()
    chunk = "x" * 1_000
    for n in range(8):
        report.set_meta(f"k{n}", chunk)
    with pytest.raises(ValidationError):
        report.set_meta("k8", chunk)
    _, meta = report.take()
    assert meta is not None
    assert len(meta.encode()) <= MAX_META_BYTES
    assert len(json.loads(meta)) == 8


def test_the_listener_hears_once_until_the_worker_takes() -> None:
    report = ProgressReport()
    heard: list[str] = []
    report.progress(1)  # nobody listens yet: kept, nothing told
    report.listen(lambda: heard.append(threading.current_thread().name))
    report.progress(2)
    report.progress(3)
    report.set_meta("k", 1)
    assert len(heard) == 1
    assert report.take() == ('{"done":3,"total":null,"note":null}', '{"k":1}')
    assert report.take() == (None, None)
    report.progress(4)
    assert len(heard) == 2
    # Values taken but not written go back, unless newer ones came; nobody is told again.
    taken = report.take()
    report.progress(5)
    report.put_back(*taken)
    assert report.take() == ('{"done":5,"total":null,"note":null}', None)
    report.listen(None)
    report.progress(6)
    assert len(heard) == 3  # after put_back the listener is told on the next change


def test_stored_values_read_back() -> None:
    at = 1_900_000_000_000
    assert progress_from(None, None) is None
    found = progress_from('{"done":3,"total":4,"note":"n"}', at)
    assert found == JobProgress(3, 4, "n", datetime.fromtimestamp(at / 1000, UTC))
    assert found.fraction == 0.75
    assert progress_from('{"done":3,"total":null,"note":null}', at).fraction is None  # type: ignore[union-attr]
    assert meta_from(None) == {}
    assert meta_from('{"a":[1]}') == {"a": [1]}


async def test_perform_gives_a_context_that_checks_reports() -> None:
    seen: list[str] = []

    async def handle(job: Add, ctx: Any) -> None:
        ctx.progress(1, 2, "half")
        ctx.set_meta("amount", job.amount)
        try:
            ctx.progress(3, 2)
        except ValidationError as exc:
            seen.append(exc.field)

    await perform(registry_for(handle), Add(4))
    assert seen == ["done"]
