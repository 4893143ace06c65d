"""The tag rule, as ``DispatchOptions`` checks it, and the stored form ``,a,b,``."""

from __future__ import annotations

import pytest

from caravel import DispatchOptions
from caravel.errors import ValidationError
from caravel.limits import MAX_TAG_LENGTH, MAX_TAGS, MAX_TAGS_LENGTH
from caravel.options import QueueOptions
from caravel.preparation import prepare_job
from caravel.tags import check_tag, stored_tags, tags_from
from tests.support import Add, make_registry


def test_tags_are_kept_in_order_as_a_tuple_without_repeats() -> None:
    given = DispatchOptions(queue="q", tags=["billing", "customer:42", "billing", "a.b_c-d"])
    assert given.tags == ("billing", "customer:42", "a.b_c-d")
    assert DispatchOptions(queue="q").tags == ()
    assert DispatchOptions(queue="q", tags=[]).tags == ()


@pytest.mark.parametrize(
    "bad",
    [
        ("Billing",),  # upper case
        ("",),
        ("a,b",),  # the stored form's separator
        ("a b",),
        ("a%",),  # a LIKE wildcard
        ("é",),
        ("x" * (MAX_TAG_LENGTH + 1),),
        (1,),
        (None,),
    ],
)
def test_a_tag_outside_the_rule_is_refused_naming_tags_and_the_rule(bad: tuple[object]) -> None:
    with pytest.raises(ValidationError) as caught:
        DispatchOptions(queue="q", tags=bad)  # type: ignore[arg-type]
    # The rule in words, the same whatever the value (which is never echoed).
    assert str(caught.value) == (
        "tags: each tag must be 1 to 64 characters of lowercase letters, digits, ':', '.', '-'"
        " or '_'"
    )


def test_one_string_is_refused_rather_than_split_into_letters() -> None:
    with pytest.raises(ValidationError) as caught:
        DispatchOptions(queue="q", tags="billing")  # type: ignore[arg-type]
    assert (caught.value.field, caught.value.rule) == ("tags", "must be a tuple or list of strings")


def test_at_most_the_limit_of_distinct_tags() -> None:
    most = tuple(f"t{n}" for n in range(MAX_TAGS))
    assert DispatchOptions(queue="q", tags=most).tags == most
    # Repeats do not count against the limit.
    assert DispatchOptions(queue="q", tags=(*most, "t0")).tags == most
    with pytest.raises(ValidationError) as caught:
        DispatchOptions(queue="q", tags=(*most, "one-more"))
    assert (caught.value.field, caught.value.rule) == ("tags", "must hold at most 16 distinct tags")


def test_the_longest_tags_fit_the_column() -> None:
    longest = tuple(f"{n:02d}" + "x" * (MAX_TAG_LENGTH - 2) for n in range(MAX_TAGS))
    stored = stored_tags(DispatchOptions(queue="q", tags=longest).tags)
    assert stored is not None
    assert len(stored) == MAX_TAGS_LENGTH


def test_a_filter_tag_follows_the_same_rule() -> None:
    assert check_tag("customer:42") == "customer:42"
    with pytest.raises(ValidationError) as caught:
        check_tag("a,b")
    assert caught.value.field == "tag"


def test_the_stored_form_round_trips_and_none_is_stored_as_null() -> None:
    assert stored_tags(("billing", "customer:42")) == ",billing,customer:42,"
    assert tags_from(",billing,customer:42,") == ("billing", "customer:42")
    assert stored_tags(()) is None
    assert tags_from(None) == ()


def test_prepared_jobs_carry_the_stored_form() -> None:
    registry, options = make_registry(), QueueOptions()
    tagged = DispatchOptions(queue="q", tags=("b", "a"))
    assert prepare_job(registry, options, Add(1), tagged, 1_000).tags == ",b,a,"
    assert prepare_job(registry, options, Add(1), DispatchOptions(queue="q"), 1_000).tags is None
