"""The input rules in ``caravel.validation`` and the checks ``DispatchOptions`` runs with them."""

from __future__ import annotations

import dataclasses
import inspect
import re
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from caravel import DispatchOptions, ValidationError
from caravel.validation import (
    check_identifier,
    check_max_attempts,
    check_not_before,
    check_queue_name,
    check_wire_name,
)

NAME_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789._-"
VALID_NAME = re.compile(r"[a-z0-9._-]+")
CONTROL_CHARS = [chr(c) for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))]
SECRET = "Sekret-Value-7f3a"

NAME_CHECKS = [
    pytest.param(check_queue_name, "queue", 64, id="queue"),
    pytest.param(check_wire_name, "wire_name", 128, id="wire_name"),
]


def _message_parts(exc: BaseException) -> str:
    """Everything a log line could show about the error."""
    return " ".join([str(exc), repr(exc), *(str(arg) for arg in exc.args)])


# ----- queue names and wire names -----------------------------------------------------------


@pytest.mark.parametrize(("check", "field", "limit"), NAME_CHECKS)
@given(data=st.data())
def test_names_of_the_allowed_alphabet_are_accepted_up_to_the_limit(
    check, field: str, limit: int, data: st.DataObject
) -> None:
    value = data.draw(st.text(alphabet=NAME_ALPHABET, min_size=1, max_size=limit))
    assert check(value) == value


@pytest.mark.parametrize(("check", "field", "limit"), NAME_CHECKS)
@given(value=st.text(max_size=200))
@example(value="")
@example(value="Default")
@example(value="a b")
@example(value="queue\n")
@example(value="é")
@example(value="a/b")
@example(value="x" * 65)
@example(value="x" * 129)
def test_names_are_accepted_exactly_when_they_follow_the_rule(
    check, field: str, limit: int, value: str
) -> None:
    valid = len(value) <= limit and VALID_NAME.fullmatch(value) is not None
    if valid:
        assert check(value) == value
    else:
        with pytest.raises(ValidationError) as caught:
            check(value)
        assert caught.value.field == field
        assert str(caught.value).startswith(f"{field}: ")


@pytest.mark.parametrize(("check", "field", "limit"), NAME_CHECKS)
def test_name_length_edge(check, field: str, limit: int) -> None:
    assert check("a" * limit) == "a" * limit
    with pytest.raises(ValidationError) as caught:
        check("a" * (limit + 1))
    assert caught.value.field == field


@pytest.mark.parametrize(("check", "field", "limit"), NAME_CHECKS)
@pytest.mark.parametrize("value", [None, 7, b"default", ["default"]])
def test_names_must_be_strings(check, field: str, limit: int, value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        check(value)
    assert caught.value.field == field


@pytest.mark.parametrize(("check", "field", "limit"), NAME_CHECKS)
@given(
    before=st.text(alphabet=NAME_ALPHABET, max_size=20),
    after=st.text(max_size=20),
)
def test_name_errors_never_echo_the_value(
    check, field: str, limit: int, before: str, after: str
) -> None:
    value = before + SECRET + after
    with pytest.raises(ValidationError) as caught:
        check(value)
    assert caught.value.field == field
    assert SECRET not in _message_parts(caught.value)


@pytest.mark.parametrize(("check", "field", "limit"), NAME_CHECKS)
def test_too_long_name_is_not_echoed(check, field: str, limit: int) -> None:
    value = "z" * (limit + 1)
    with pytest.raises(ValidationError) as caught:
        check(value)
    assert "zzzz" not in _message_parts(caught.value)


def test_a_name_valid_for_one_rule_is_still_checked_against_the_other() -> None:
    wire_only = "w" * 100  # a valid wire name, too long for a queue
    assert check_wire_name(wire_only) == wire_only
    assert check_wire_name(wire_only) == wire_only  # asked again
    with pytest.raises(ValidationError):
        check_queue_name(wire_only)


def test_many_distinct_names_are_each_checked() -> None:
    for n in range(3000):
        assert check_queue_name(f"queue-{n}") == f"queue-{n}"
    assert check_queue_name("queue-2999") == "queue-2999"
    with pytest.raises(ValidationError):
        check_queue_name("Queue-1")


def test_custom_field_name_is_reported() -> None:
    with pytest.raises(ValidationError) as caught:
        check_queue_name("Bad Queue", field="target_queue")
    assert caught.value.field == "target_queue"


def test_validation_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"^queue: "):
        check_queue_name("UPPER")


# ----- tenant ids and idempotency keys -----------------------------------------------------


def _identifier_is_valid(value: str) -> bool:
    return (
        bool(value.strip()) and len(value) <= 128 and not any(ch in CONTROL_CHARS for ch in value)
    )


@pytest.mark.parametrize("field", ["tenant_id", "idempotency_key"])
@given(value=st.text(max_size=160))
@example(value=" ")
@example(value="\t\n")
@example(value="\u2003")
@example(value=" padded ")
@example(value="x" * 128)
@example(value="x" * 129)
@example(value="é" * 128)
@example(value="\U0001f600" * 128)
def test_identifiers_are_accepted_exactly_when_they_follow_the_rule(field: str, value: str) -> None:
    if _identifier_is_valid(value):
        # Kept exactly as given: no trimming, no case folding.
        assert check_identifier(value, field) == value
    else:
        with pytest.raises(ValidationError) as caught:
            check_identifier(value, field)
        assert caught.value.field == field


@pytest.mark.parametrize("field", ["tenant_id", "idempotency_key"])
@pytest.mark.parametrize("control", CONTROL_CHARS, ids=lambda c: f"U+{ord(c):04X}")
def test_every_control_character_is_rejected(field: str, control: str) -> None:
    with pytest.raises(ValidationError) as caught:
        check_identifier(f"{SECRET}{control}tail", field)
    assert caught.value.field == field
    assert SECRET not in _message_parts(caught.value)


@pytest.mark.parametrize("field", ["tenant_id", "idempotency_key"])
@given(
    surrogate=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    position=st.integers(min_value=0, max_value=len(SECRET)),
)
def test_lone_surrogates_are_rejected(field: str, surrogate: str, position: int) -> None:
    value = SECRET[:position] + surrogate + SECRET[position:]
    with pytest.raises(ValidationError) as caught:
        check_identifier(value, field)
    assert caught.value.field == field
    assert SECRET[:position] + surrogate not in _message_parts(caught.value)


@pytest.mark.parametrize("field", ["tenant_id", "idempotency_key"])
def test_identifier_length_edge_counts_characters(field: str) -> None:
    assert check_identifier("ü" * 128, field) == "ü" * 128
    with pytest.raises(ValidationError) as caught:
        check_identifier("ü" * 129, field)
    assert caught.value.field == field


@pytest.mark.parametrize("field", ["tenant_id", "idempotency_key"])
@pytest.mark.parametrize("value", [None, 42, b"tenant", ("t",)])
def test_identifiers_must_be_strings(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        check_identifier(value, field)
    assert caught.value.field == field


@pytest.mark.parametrize("field", ["tenant_id", "idempotency_key"])
@given(extra=st.text(max_size=40))
def test_identifier_errors_never_echo_the_value(field: str, extra: str) -> None:
    for value in (SECRET + "\x00" + extra, SECRET + "x" * 130 + extra, SECRET + "\x9f"):
        with pytest.raises(ValidationError) as caught:
            check_identifier(value, field)
        assert SECRET not in _message_parts(caught.value)


# ----- due times ---------------------------------------------------------------------------


class _NoOffset(tzinfo):
    """An 'aware' datetime whose zone cannot say its offset: as good as naive."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None

    def tzname(self, dt: datetime | None) -> str | None:
        return None


@given(moment=st.datetimes())
def test_naive_datetimes_are_rejected(moment: datetime) -> None:
    with pytest.raises(ValidationError) as caught:
        check_not_before(moment)
    assert caught.value.field == "not_before"


@given(
    moment=st.datetimes(
        timezones=st.sampled_from(
            [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]
        )
    )
)
def test_aware_datetimes_are_accepted(moment: datetime) -> None:
    assert check_not_before(moment) is moment


def test_zone_without_an_offset_counts_as_naive() -> None:
    with pytest.raises(ValidationError):
        check_not_before(datetime(2030, 1, 1, tzinfo=_NoOffset()))


@pytest.mark.parametrize("value", [date(2030, 1, 1), "2030-01-01T00:00:00Z", 1_900_000_000, None])
def test_not_before_must_be_a_datetime(value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        check_not_before(value)
    assert caught.value.field == "not_before"


# ----- attempt budgets ---------------------------------------------------------------------


@given(value=st.integers(min_value=1, max_value=100))
def test_max_attempts_in_range_are_accepted(value: int) -> None:
    assert check_max_attempts(value) == value


@given(value=st.integers().filter(lambda v: not 1 <= v <= 100))
@example(value=0)
@example(value=101)
@example(value=-1)
def test_max_attempts_out_of_range_are_rejected(value: int) -> None:
    with pytest.raises(ValidationError) as caught:
        check_max_attempts(value)
    assert caught.value.field == "max_attempts"


@pytest.mark.parametrize("value", [True, False, 3.0, "3", None])
def test_max_attempts_must_be_a_real_integer(value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        check_max_attempts(value)
    assert caught.value.field == "max_attempts"


# ----- DispatchOptions ---------------------------------------------------------------------


def test_dispatch_options_defaults() -> None:
    options = DispatchOptions(queue="emails", tenant_id="tenant-1")
    assert options.idempotency_key is None
    assert options.not_before is None
    assert options.max_attempts is None
    assert options.priority is None  # the job type's, else 0


def test_dispatch_options_keep_valid_values_exactly() -> None:
    due = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
    options = DispatchOptions(
        queue="a.b-c_9",
        tenant_id=" Tenant Ä ",
        idempotency_key="order/42 ✓",
        not_before=due,
        max_attempts=100,
        priority=-100,
    )
    assert options.priority == -100
    assert DispatchOptions(queue="q", priority=100).priority == 100
    assert options.queue == "a.b-c_9"
    assert options.tenant_id == " Tenant Ä "
    assert options.idempotency_key == "order/42 ✓"
    assert options.not_before == due
    assert options.max_attempts == 100


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"queue": "Emails"}, "queue"),
        ({"queue": ""}, "queue"),
        ({"queue": "q" * 65}, "queue"),
        ({"tenant_id": ""}, "tenant_id"),
        ({"tenant_id": "   "}, "tenant_id"),
        ({"tenant_id": "t\x00"}, "tenant_id"),
        ({"tenant_id": "t" * 129}, "tenant_id"),
        ({"tenant_id": "\udc80"}, "tenant_id"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"idempotency_key": "k\x7f"}, "idempotency_key"),
        ({"idempotency_key": "k\x85"}, "idempotency_key"),
        ({"idempotency_key": "k" * 129}, "idempotency_key"),
        ({"idempotency_key": "\ud800x"}, "idempotency_key"),
        ({"not_before": datetime(2030, 1, 1)}, "not_before"),
        ({"delay": timedelta(milliseconds=-1)}, "delay"),
        ({"delay": timedelta(days=36_501)}, "delay"),
        ({"delay": 5}, "delay"),
        ({"delay": timedelta(0), "not_before": datetime(2030, 1, 1, tzinfo=UTC)}, "delay"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 101}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"priority": 101}, "priority"),
        ({"priority": -101}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": False}, "priority"),
        ({"priority": 0.0}, "priority"),
        ({"priority": "5"}, "priority"),
    ],
)
def test_dispatch_options_reject_bad_fields(changes: dict[str, object], field: str) -> None:
    arguments: dict[str, object] = {"queue": "default", "tenant_id": "tenant-a", **changes}
    with pytest.raises(ValidationError) as caught:
        DispatchOptions(**arguments)  # type: ignore[arg-type]
    assert caught.value.field == field
    if field == "priority":
        assert caught.value.rule == "must be an integer from -100 to 100"


def test_dispatch_options_never_echo_the_tenant_or_key() -> None:
    with pytest.raises(ValidationError) as caught:
        DispatchOptions(queue="default", tenant_id=SECRET + "\x01")
    assert SECRET not in _message_parts(caught.value)
    with pytest.raises(ValidationError) as caught:
        DispatchOptions(queue="default", tenant_id="t", idempotency_key=SECRET * 10)
    assert SECRET not in _message_parts(caught.value)


def test_dispatch_options_are_frozen() -> None:
    options = DispatchOptions(queue="default", tenant_id="tenant-a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.tenant_id = "\x00"  # type: ignore[misc]


def test_a_sqlite_url_with_a_host_is_refused_with_the_slashes_explained() -> None:
    from caravel.store.urls import backend_of

    with pytest.raises(ValidationError, match="three slashes"):
        backend_of("sqlite://queue.db")
    assert backend_of("sqlite:///queue.db") == "sqlite"
    assert backend_of("sqlite://") == "sqlite"


def test_urls_name_one_of_the_four_stores_and_only_sql_ones_have_drivers() -> None:
    from caravel.store.urls import async_url, backend_of, sync_url

    assert backend_of("memory://") == backend_of("memory://shared") == "memory"
    assert backend_of("postgres://db.example/queue") == "postgresql"
    # MariaDB by either name, through asyncmy, and PyMySQL for migrations.
    assert backend_of("mysql://db.example/queue") == backend_of("mariadb://h/q") == "mariadb"
    assert async_url("mysql://u:p@db.example:3307/queue").drivername == "mariadb+asyncmy"
    assert sync_url("mariadb+asyncmy://db.example/queue").drivername == "mariadb+pymysql"
    assert sync_url("mariadb://u:p@db.example:3307/queue").database == "queue"
    with pytest.raises(ValidationError, match="postgresql://, mariadb://, sqlite:// or memory://"):
        backend_of("oracle://db.example/queue")
    with pytest.raises(ValidationError, match="needs no migrations"):
        sync_url("memory://shared")


@pytest.mark.parametrize(
    ("version", "shown"),
    [
        ("10.6.21-MariaDB-log", "MariaDB 10.6.21"),
        ("5.5.68-MariaDB", "MariaDB 5.5.68"),
        ("8.0.36", "MariaDB (a MySQL 8.0.36 server)"),
    ],
)
def test_a_server_older_than_mariadb_10_11_is_refused_naming_its_version(
    version: str, shown: str
) -> None:
    from caravel import DatabaseVersionError, StoreError
    from caravel.store.mariadb.connections import check_version

    with pytest.raises(DatabaseVersionError) as caught:
        check_version(version)
    assert isinstance(caught.value, StoreError)
    message = str(caught.value)
    assert f"the server runs {shown};" in message
    assert "needs MariaDB 10.11 or newer" in message
    assert "\n" not in message
    assert (caught.value.needed, caught.value.operation) == ("10.11", "connect")


@pytest.mark.parametrize(
    "version", ["10.11.19-MariaDB-0+deb12u1", "11.4.5-MariaDB", "12.1.2-MariaDB"]
)
def test_maintained_mariadb_servers_pass_the_version_check(version: str) -> None:
    from caravel.store.mariadb.connections import check_version

    check_version(version)


def test_dispatch_options_takes_its_fields_as_keywords_with_their_defaults() -> None:
    # Its __init__ is written out (for speed): it must take every field, in order, keyword
    # only, with the field's default, and set each.
    parameters = list(inspect.signature(DispatchOptions).parameters.values())
    fields = dataclasses.fields(DispatchOptions)

    assert [p.name for p in parameters] == [f.name for f in fields]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters)
    assert [p.default for p in parameters] == [
        inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default for f in fields
    ]
    given = {
        "queue": "q",
        "tenant_id": "t",
        "idempotency_key": None,
        "not_before": datetime(2030, 1, 1, tzinfo=UTC),
        "delay": None,
        "max_attempts": 4,
        "tags": ("a",),
        "priority": 9,
        "pending_key": "p",
        "on_pending": "replace",
        "max_debounce": timedelta(seconds=5),
        "timeout": timedelta(seconds=3),
        "partition_key": "k",
    }
    assert dataclasses.asdict(DispatchOptions(**given)) == given  # type: ignore[arg-type]
