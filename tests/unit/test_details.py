"""Safe details: :func:`clean_detail` (what any kept text goes through), the directives that
carry one, the choice between a handler's detail and the redactor's, and ``redactor``'s check
in :class:`WorkerOptions`."""

from __future__ import annotations

import logging
import unicodedata

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from caravel import Discard, JobFailed, OptionsError, ValidationError, WorkerOptions
from caravel.details import ELLIPSIS, clean_detail, detail_of
from caravel.limits import MAX_DETAIL_LENGTH

HIDDEN = {"Cc", "Cf", "Cs"}


def reference(text: str) -> str | None:
    """What clean_detail means, written as plainly as possible (and slowly)."""
    spaced = "".join(" " if c.isspace() else c for c in text)
    visible = "".join(c for c in spaced if c == " " or unicodedata.category(c) not in HIDDEN)
    words = " ".join(visible.split(" "))
    while "  " in words:
        words = words.replace("  ", " ")
    words = words.strip(" ")
    if len(words) > MAX_DETAIL_LENGTH:
        words = words[: MAX_DETAIL_LENGTH - 1].rstrip(" ") + ELLIPSIS
    return words or None


#: Text heavy in what cleaning is about: controls, format marks, surrogates, every white space.
awkward = st.text(
    st.one_of(
        st.characters(),
        st.sampled_from("\x00\t\n\r\x0b\x0c\x1b\x7f\x85\xa0\u200b\u200d\u202e\u2028\u2066\ufeff"),
        st.characters(categories=["Cs"]),
    ),
    max_size=1200,
)


@given(awkward)
@example("a" * (MAX_DETAIL_LENGTH + 1))
@example("a" * (MAX_DETAIL_LENGTH - 1) + " b")
@example(" " * 5000 + "x")
def test_clean_detail_is_the_reference(text: str) -> None:
    assert clean_detail(text) == reference(text)


@given(awkward)
def test_a_clean_detail_is_bounded_readable_and_stays_as_it_is(text: str) -> None:
    cleaned = clean_detail(text)
    if cleaned is None:
        return
    assert 0 < len(cleaned) <= MAX_DETAIL_LENGTH
    assert not any(unicodedata.category(c) in HIDDEN for c in cleaned)
    assert all(c == " " or not c.isspace() for c in cleaned)
    assert cleaned == cleaned.strip()
    assert "  " not in cleaned
    assert clean_detail(cleaned) == cleaned  # cleaning twice changes nothing
    cleaned.encode("utf-8")  # every database can hold it


@given(st.text(st.characters(categories=["L", "N", "P"]), min_size=1, max_size=MAX_DETAIL_LENGTH))
def test_a_short_plain_text_is_kept_as_it_is(text: str) -> None:
    assert clean_detail(text) == text


def test_examples() -> None:
    assert clean_detail("provider answered 503") == "provider answered 503"
    assert clean_detail("  line one\r\n\tline two\u2028three ") == "line one line two three"
    assert clean_detail("bell\x07 and \x1b[31mred\x1b[0m") == "bell and [31mred[0m"
    assert clean_detail("pass\u200bword \u202eevil") == "password evil"
    assert clean_detail("lone \ud800 surrogate") == "lone surrogate"
    assert clean_detail("") is None
    assert clean_detail(" \n\x00\u200b ") is None
    cut = clean_detail("x" * 10_000)
    assert cut == "x" * (MAX_DETAIL_LENGTH - 1) + ELLIPSIS


# ----- the directives -----------------------------------------------------------------------


def test_job_failed_keeps_its_safe_detail_apart_from_its_message() -> None:
    plain = JobFailed("could not reach the provider")
    assert (str(plain), plain.safe_detail) == ("could not reach the provider", None)
    marked = JobFailed(safe_detail="provider answered 503")
    assert (str(marked), marked.safe_detail) == ("provider answered 503", "provider answered 503")
    both = JobFailed("503 for order 7", safe_detail="provider answered 503")
    assert (str(both), both.safe_detail) == ("503 for order 7", "provider answered 503")
    assert str(JobFailed()) == ""
    assert not issubclass(JobFailed, ValidationError)


def test_discard_carries_a_safe_detail_by_name_only() -> None:
    discard = Discard("PaymentDeclined", safe_detail="card issuer declined")
    assert (discard.category, discard.safe_detail) == ("PaymentDeclined", "card issuer declined")
    assert Discard().safe_detail is None
    with pytest.raises(TypeError):
        Discard("PaymentDeclined", "card issuer declined")  # type: ignore[misc]


@pytest.mark.parametrize("make", [JobFailed, Discard])
def test_a_safe_detail_that_is_not_text_is_refused_by_name(make: type[Exception]) -> None:
    with pytest.raises(ValidationError) as raised:
        make(safe_detail=503)
    assert raised.value.field == "safe_detail"
    assert "503" not in str(raised.value)


# ----- choosing the detail ------------------------------------------------------------------

FIELDS = {"job_id": "j", "queue": "q", "job_type": "t", "attempt": 1}
SECRET = "secret-4f1a"


def test_the_handler_s_detail_wins_and_the_redactor_is_not_asked() -> None:
    asked: list[BaseException] = []

    def redactor(exc: BaseException) -> str:
        asked.append(exc)
        return "from the redactor"

    failed = JobFailed(SECRET, safe_detail="provider\nanswered 503")
    assert detail_of(failed, redactor, log_fields=FIELDS) == "provider answered 503"
    discard = Discard(safe_detail="gone")
    assert detail_of(discard, redactor, log_fields=FIELDS) == "gone"
    assert asked == []


def test_without_a_safe_detail_the_redactor_decides() -> None:
    def redactor(exc: BaseException) -> str | None:
        return "timeout talking to the bank" if isinstance(exc, TimeoutError) else None

    assert detail_of(TimeoutError(SECRET), redactor, log_fields=FIELDS) == (
        "timeout talking to the bank"
    )
    assert detail_of(KeyError(SECRET), redactor, log_fields=FIELDS) is None
    assert detail_of(JobFailed(SECRET), redactor, log_fields=FIELDS) is None
    assert detail_of(RuntimeError(SECRET), None, log_fields=FIELDS) is None


def test_a_redactor_that_fails_gives_no_detail_and_one_line_without_a_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)

    def raising(exc: BaseException) -> str:
        raise ValueError(f"cannot redact {exc}")

    def wrong(exc: BaseException) -> object:
        return [str(exc)]

    assert detail_of(RuntimeError(SECRET), raising, log_fields=FIELDS) is None
    assert detail_of(RuntimeError(SECRET), wrong, log_fields=FIELDS) is None  # type: ignore[arg-type]
    assert [(r.levelname, r.getMessage(), r.reason) for r in caplog.records] == [  # type: ignore[attr-defined]
        ("WARNING", "redactor failed; the attempt keeps no detail", "ValueError"),
        (
            "WARNING",
            "redactor returned neither a string nor None; the attempt keeps no detail",
            "list",
        ),
    ]
    for record in caplog.records:
        assert (record.job_id, record.error_type) == ("j", "RuntimeError")  # type: ignore[attr-defined]
        assert record.exc_info is None
        for key, value in vars(record).items():
            assert SECRET not in str(value), key


# ----- WorkerOptions(redactor=...) ----------------------------------------------------------


def named(exc: BaseException) -> str:
    return type(exc).__name__


class Callable:
    def __call__(self, exc: BaseException, extra: int = 0) -> None:
        return None


@pytest.mark.parametrize("redactor", [None, named, Callable(), lambda exc: None, len])
def test_a_redactor_is_any_function_of_one_exception(redactor: object) -> None:
    assert WorkerOptions(redactor=redactor).redactor is redactor  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "redactor",
    ["module:function", 1, (lambda: None), (lambda exc, more: None), str, repr],
    ids=["text", "number", "no-argument", "two-arguments", "str", "repr"],
)
def test_a_redactor_that_cannot_be_one_is_refused_by_name(redactor: object) -> None:
    with pytest.raises(OptionsError) as raised:
        WorkerOptions(redactor=redactor)  # type: ignore[arg-type]
    assert raised.value.field == "redactor"
