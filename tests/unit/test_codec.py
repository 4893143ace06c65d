"""Canonical payload JSON: ``caravel.codec``."""

from __future__ import annotations

import dataclasses
import enum
import json
from datetime import UTC, datetime
from typing import Annotated, Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, PlainSerializer, SerializationInfo, TypeAdapter, field_serializer

from caravel import ValidationError
from caravel.codec import PayloadDecodeError, decode_payload, encode_payload, json_depth

LIMIT = 1024 * 1024
SECRET = "Sekret-Payload-51c9"


@dataclasses.dataclass(frozen=True)
class Order:
    order_id: int
    customer: str
    amounts: list[float]
    tags: dict[str, str]
    note: str | None = None


class Line(BaseModel):
    sku: str
    quantity: int


class Invoice(BaseModel):
    number: str
    lines: list[Line]
    meta: dict[str, int]
    paid: bool = False
    total: float | None = None


@dataclasses.dataclass(frozen=True)
class Blob:
    text: str


@dataclasses.dataclass
class Doc:
    data: Any


class Loose(BaseModel):
    data: dict[str, Any]


@dataclasses.dataclass
class Floats:
    value: float
    many: list[float] = dataclasses.field(default_factory=list)
    named: dict[str, float] = dataclasses.field(default_factory=dict)


ORDER = TypeAdapter(Order)
INVOICE = TypeAdapter(Invoice)
BLOB = TypeAdapter(Blob)
DOC = TypeAdapter(Doc)
LOOSE = TypeAdapter(Loose)
FLOATS = TypeAdapter(Floats)

finite_floats = st.floats(allow_nan=False, allow_infinity=False)

orders = st.builds(
    Order,
    order_id=st.integers(),
    customer=st.text(),
    amounts=st.lists(finite_floats, max_size=5),
    tags=st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=5),
    note=st.none() | st.text(),
)

invoices = st.builds(
    Invoice,
    number=st.text(),
    lines=st.lists(st.builds(Line, sku=st.text(), quantity=st.integers()), max_size=4),
    meta=st.dictionaries(st.text(max_size=10), st.integers(), max_size=5),
    paid=st.booleans(),
    total=st.none() | finite_floats,
)


def _nested_lists(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def _nested_dicts(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = {"k": value}
    return value


def _keys_sorted_everywhere(text: str) -> bool:
    ok = True

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal ok
        keys = [key for key, _ in pairs]
        ok = ok and keys == sorted(keys)
        return dict(pairs)

    json.loads(text, object_pairs_hook=hook)
    return ok


# ----- canonical form ----------------------------------------------------------------------


def test_encoding_is_compact_sorted_and_keeps_non_ascii() -> None:
    order = Order(
        order_id=7,
        customer="Zoë 北京 \U0001f680",
        amounts=[1.5, 2.0],
        tags={"zeta": "z", "alpha": "a", "Beta": "b"},
    )
    text = encode_payload(ORDER, order, LIMIT)
    assert text == (
        '{"amounts":[1.5,2.0],"customer":"Zoë 北京 \U0001f680","note":null,"order_id":7,'
        '"tags":{"Beta":"b","alpha":"a","zeta":"z"}}'
    )
    assert "\\u" not in text


@given(pairs=st.lists(st.tuples(st.text(max_size=8), st.text(max_size=8)), max_size=8))
def test_key_insertion_order_does_not_change_the_bytes(pairs: list[tuple[str, str]]) -> None:
    forward = dict(pairs)
    backward = dict(reversed(list(forward.items())))
    a = Order(order_id=1, customer="c", amounts=[], tags=forward)
    b = Order(order_id=1, customer="c", amounts=[], tags=backward)
    assert encode_payload(ORDER, a, LIMIT).encode() == encode_payload(ORDER, b, LIMIT).encode()


@settings(max_examples=75)
@given(order=orders)
def test_dataclass_encoding_is_canonical(order: Order) -> None:
    text = encode_payload(ORDER, order, LIMIT)
    copy = dataclasses.replace(order, amounts=list(order.amounts), tags=dict(order.tags))
    assert encode_payload(ORDER, copy, LIMIT) == text
    assert _keys_sorted_everywhere(text)
    # A fixed point of canonical JSON: no whitespace, no escaping of non-ASCII.
    assert text == json.dumps(
        json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


@settings(max_examples=75)
@given(invoice=invoices)
def test_pydantic_encoding_is_canonical(invoice: Invoice) -> None:
    text = encode_payload(INVOICE, invoice, LIMIT)
    assert encode_payload(INVOICE, invoice.model_copy(deep=True), LIMIT) == text
    assert _keys_sorted_everywhere(text)
    assert text == json.dumps(
        json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


# ----- round trip --------------------------------------------------------------------------


@settings(max_examples=150)
@given(order=orders)
@example(order=Order(order_id=2**80, customer="\x00\u2028é", amounts=[-0.0, 1e308], tags={}))
def test_dataclass_round_trip(order: Order) -> None:
    decoded = decode_payload(ORDER, encode_payload(ORDER, order, LIMIT))
    assert type(decoded) is Order
    assert decoded == order


@settings(max_examples=150)
@given(invoice=invoices)
def test_pydantic_round_trip(invoice: Invoice) -> None:
    decoded = decode_payload(INVOICE, encode_payload(INVOICE, invoice, LIMIT))
    assert type(decoded) is Invoice
    assert decoded == invoice


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | finite_floats | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=150)
@given(value=json_values)
def test_untyped_json_round_trip(value: Any) -> None:
    text = encode_payload(DOC, Doc(data=value), LIMIT)
    assert decode_payload(DOC, text) == Doc(data=value)
    assert _keys_sorted_everywhere(text)


@settings(max_examples=150)
@given(value=json_values)
def test_encoding_matches_the_standard_librarys_canonical_spelling(value: Any) -> None:
    # The encoder is built once from the standard library's C encoder; its output must be the
    # documented canonical form, byte for byte.
    expected = json.dumps(
        {"data": value}, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    assert encode_payload(DOC, Doc(data=value), LIMIT) == expected


# ----- one dump or two ---------------------------------------------------------------------
# The checks read pydantic's Python-mode dump; the stored text is the canonical form of its
# JSON-mode dump. When the Python-mode dump holds only JSON's own types and the type has no
# custom serializer, it is used as the JSON-mode dump. Either way the text must be the one the
# JSON-mode dump gives.


class Colour(enum.Enum):
    RED = "red"
    PAIR = (1, 2)


class Level(enum.IntEnum):
    LOW = 1


python_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | finite_floats
    | st.text()
    | st.datetimes(timezones=st.just(UTC))
    | st.uuids()
    | st.decimals(allow_nan=False, allow_infinity=False, places=3)
    | st.sampled_from([Colour.RED, Colour.PAIR, Level.LOW]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.frozensets(st.integers(), max_size=3)
        | st.dictionaries(st.text(max_size=8), children, max_size=4)
        | st.dictionaries(st.integers(), children, max_size=3)
    ),
    max_leaves=20,
)


def _json_mode_text(adapter: TypeAdapter[Any], job: object) -> str:
    plain = adapter.dump_python(job, mode="json")
    return json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@settings(max_examples=200)
@given(value=python_values)
def test_the_text_is_the_json_mode_dump_whatever_python_values_the_job_holds(value: Any) -> None:
    assert encode_payload(DOC, Doc(data=value), LIMIT) == _json_mode_text(DOC, Doc(data=value))


def _by_mode(value: int, info: SerializationInfo) -> object:
    return {"spelled": str(value)} if info.mode == "json" else value


@dataclasses.dataclass
class ModeAware:
    count: Annotated[int, PlainSerializer(_by_mode)]


class ModeAwareModel(BaseModel):
    count: int

    @field_serializer("count")
    def spell(self, value: int, info: SerializationInfo) -> object:
        return _by_mode(value, info)


@pytest.mark.parametrize(
    ("adapter", "job"),
    [
        pytest.param(TypeAdapter(ModeAware), ModeAware(5), id="annotated-serializer"),
        pytest.param(TypeAdapter(ModeAwareModel), ModeAwareModel(count=5), id="field-serializer"),
    ],
)
def test_a_serializer_that_answers_by_mode_is_stored_as_json_mode_spells_it(
    adapter: TypeAdapter[Any], job: object
) -> None:
    # Its Python-mode dump holds only JSON types ({"count": 5}), but it is not the JSON dump.
    assert adapter.dump_python(job, mode="python") == {"count": 5}
    assert encode_payload(adapter, job, LIMIT) == '{"count":{"spelled":"5"}}'


class CountingAdapter(TypeAdapter[Any]):
    def __init__(self, kind: Any) -> None:
        super().__init__(kind)
        self.dumps: list[str] = []

    def dump_python(self, instance: Any, /, **kwargs: Any) -> Any:
        self.dumps.append(kwargs["mode"])
        return super().dump_python(instance, **kwargs)


@pytest.mark.parametrize(
    ("value", "dumps"),
    [
        pytest.param({"a": [1, 2.5, None, True, "é"]}, ["python"], id="json-types"),
        pytest.param({"a": (1, 2)}, ["python"], id="tuple"),
        pytest.param({"at": datetime(2026, 1, 1, tzinfo=UTC)}, ["python", "json"], id="datetime"),
        pytest.param({1: "a"}, ["python", "json"], id="integer-key"),
        pytest.param({"s": frozenset({1})}, ["python", "json"], id="set"),
        pytest.param({"e": Level.LOW}, ["python", "json"], id="int-enum"),
    ],
)
def test_a_second_dump_is_taken_only_when_json_mode_could_differ(
    value: Any, dumps: list[str]
) -> None:
    adapter = CountingAdapter(Doc)
    encode_payload(adapter, Doc(data=value), LIMIT)
    assert adapter.dumps == dumps


# ----- values JSON cannot spell ------------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")], ids=repr)
@pytest.mark.parametrize(
    ("adapter", "make"),
    [
        pytest.param(FLOATS, lambda x: Floats(value=x), id="float-field"),
        pytest.param(FLOATS, lambda x: Floats(value=0.0, many=[1.0, x]), id="list-of-float"),
        pytest.param(FLOATS, lambda x: Floats(value=0.0, named={"a": x}), id="dict-of-float"),
        pytest.param(ORDER, lambda x: Order(1, "c", [x], {}), id="dataclass-list"),
        pytest.param(
            INVOICE, lambda x: Invoice(number="n", lines=[], meta={}, total=x), id="pydantic"
        ),
        pytest.param(DOC, lambda x: Doc(data=x), id="any-field"),
        pytest.param(DOC, lambda x: Doc(data={"deep": [1, x]}), id="any-nested"),
        pytest.param(LOOSE, lambda x: Loose(data={"x": x}), id="dict-str-any"),
    ],
)
def test_nan_and_infinity_are_rejected(adapter: TypeAdapter[Any], make: Any, bad: float) -> None:
    with pytest.raises(ValidationError) as caught:
        encode_payload(adapter, make(bad), LIMIT)
    assert caught.value.field == "payload"


@pytest.mark.parametrize(
    "job",
    [
        Blob("ok\ud800"),
        Blob("\udfff"),
        Doc(data={"key\udc80": 1}),
        Doc(data=["fine", ["\ud83d"]]),
        Order(1, "c", [], {"\ud800": "v"}),
    ],
    ids=["str", "low", "dict-key", "nested-list", "dataclass-dict-key"],
)
def test_lone_surrogates_are_rejected(job: Any) -> None:
    adapter = TypeAdapter(type(job))
    with pytest.raises(ValidationError) as caught:
        encode_payload(adapter, job, LIMIT)
    assert caught.value.field == "payload"


def test_unserializable_values_are_rejected() -> None:
    with pytest.raises(ValidationError) as caught:
        encode_payload(DOC, Doc(data=object()), LIMIT)
    assert caught.value.field == "payload"


def test_error_messages_never_contain_the_payload() -> None:
    cases: list[tuple[TypeAdapter[Any], Any, int]] = [
        (BLOB, Blob(SECRET * 10), 20),
        (FLOATS, Floats(value=0.0, named={SECRET: float("inf")}), LIMIT),
        (BLOB, Blob(SECRET + "\ud800"), LIMIT),
        (DOC, Doc(data={SECRET: _nested_lists(40)}), LIMIT),
    ]
    for adapter, job, limit in cases:
        with pytest.raises(ValidationError) as caught:
            encode_payload(adapter, job, limit)
        assert SECRET not in f"{caught.value} {caught.value!r} {caught.value.args}"


# ----- size limit --------------------------------------------------------------------------

OVERHEAD = len('{"text":""}')


@pytest.mark.parametrize("char", ["a", "é", "€", "\U0001f600"], ids=["1B", "2B", "3B", "4B"])
def test_size_limit_counts_utf8_bytes(char: str) -> None:
    width = len(char.encode("utf-8"))
    job = Blob(char * 100)
    size = OVERHEAD + 100 * width
    text = encode_payload(BLOB, job, size)
    assert len(text.encode("utf-8")) == size
    with pytest.raises(ValidationError) as caught:
        encode_payload(BLOB, job, size - 1)
    assert caught.value.field == "payload"


def test_multibyte_payload_under_the_limit_in_characters_but_over_in_bytes_fails() -> None:
    job = Blob("€" * 30)  # 41 characters of JSON, 101 bytes
    assert len(json.dumps({"text": job.text}, separators=(",", ":"), ensure_ascii=False)) < 50
    with pytest.raises(ValidationError):
        encode_payload(BLOB, job, 100)
    assert encode_payload(BLOB, job, 101)


@given(text=st.text(max_size=60))
def test_payload_exactly_at_the_limit_passes_and_one_byte_over_fails(text: str) -> None:
    job = Blob(text)
    size = len(encode_payload(BLOB, job, LIMIT).encode("utf-8"))
    assert encode_payload(BLOB, job, size)
    with pytest.raises(ValidationError):
        encode_payload(BLOB, job, size - 1)


# ----- depth limit -------------------------------------------------------------------------


def test_json_depth_counts_containers() -> None:
    assert json_depth(0) == 0
    assert json_depth("text") == 0
    assert json_depth([]) == 1
    assert json_depth({}) == 1
    assert json_depth({"a": [1, {"b": []}]}) == 4
    assert json_depth([[1], [[2]], 3]) == 3


@pytest.mark.parametrize("nest", [_nested_lists, _nested_dicts], ids=["lists", "dicts"])
def test_depth_32_passes_and_33_fails(nest: Any) -> None:
    # The dataclass itself is the outermost JSON object: one level.
    at_limit = Doc(data=nest(31))
    text = encode_payload(DOC, at_limit, LIMIT)
    assert json_depth(json.loads(text)) == 32
    assert decode_payload(DOC, text) == at_limit
    with pytest.raises(ValidationError) as caught:
        encode_payload(DOC, Doc(data=nest(32)), LIMIT)
    assert caught.value.field == "payload"


@pytest.mark.parametrize("nest", [_nested_lists, _nested_dicts], ids=["lists", "dicts"])
def test_hostile_nesting_fails_cleanly(nest: Any) -> None:
    deep = Doc(data=nest(100_000))
    assert json_depth(deep.data) > 32  # iterative: no RecursionError here either
    with pytest.raises(ValidationError) as caught:
        encode_payload(DOC, deep, 100 * LIMIT)
    assert caught.value.field == "payload"


# ----- decoding ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "{",
        '{"text": "unterminated',
        "\x00",
        "[]",
        "null",
        '"text"',
        "42",
        "{}",
        '{"txt": "x"}',
        '{"text": 5}',
        '{"text": ["x"]}',
        "[" * 100_000,
        "[" * 50_000 + "]" * 50_000,
    ],
    ids=lambda t: repr(t[:20]),
)
def test_decoding_garbage_or_the_wrong_shape_raises_payload_decode_error(text: str) -> None:
    with pytest.raises(PayloadDecodeError):
        decode_payload(BLOB, text)


@pytest.mark.parametrize(
    "text",
    [
        '{"number": 5, "lines": [], "meta": {}}',
        '{"number": "n", "lines": [{"sku": "s"}], "meta": {}}',
        '{"number": "n", "lines": [], "meta": {"a": "not an int"}}',
        '{"lines": [], "meta": {}}',
    ],
)
def test_decoding_a_pydantic_payload_of_the_wrong_shape_fails(text: str) -> None:
    with pytest.raises(PayloadDecodeError):
        decode_payload(INVOICE, text)


def test_decoding_deeply_nested_valid_json_fails_cleanly() -> None:
    text = '{"data":' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(PayloadDecodeError):
        decode_payload(DOC, text)


# ----- bytes -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Attachment:
    name: str
    data: bytes


class Mail(BaseModel):
    subject: str
    body: bytes = b""
    attachments: list[Attachment] = []
    headers: dict[str, bytes] = {}


MAIL = TypeAdapter(Mail)
NOT_UTF8 = b"\xff\xfe" + SECRET.encode()


def test_bytes_that_are_utf8_are_stored_as_text_and_round_trip() -> None:
    job = Mail(subject="s", body="hé".encode(), attachments=[Attachment("a", b"ok")])
    text = encode_payload(MAIL, job, LIMIT, job_type="mail.send.v1")
    assert json.loads(text)["body"] == "hé"
    assert decode_payload(MAIL, text) == job


@pytest.mark.parametrize(
    ("job", "field"),
    [
        (Mail(subject="s", body=NOT_UTF8), "payload.body"),
        (
            Mail(subject="s", attachments=[Attachment("a", b"ok"), Attachment("b", NOT_UTF8)]),
            "payload.attachments[1].data",
        ),
        # A mapping key is payload data: the path never shows it.
        (Mail(subject="s", headers={SECRET: NOT_UTF8}), "payload.headers[*]"),
        (Attachment("a", NOT_UTF8), "payload.data"),
    ],
    ids=["model-field", "nested-dataclass", "dict-value", "dataclass"],
)
def test_bytes_that_are_not_utf8_name_the_field_and_the_job_type(job: Any, field: str) -> None:
    adapter = TypeAdapter(type(job))
    with pytest.raises(ValidationError) as caught:
        encode_payload(adapter, job, LIMIT, job_type="mail.send.v1")
    assert caught.value.field == field
    assert "UTF-8" in caught.value.rule
    assert "mail.send.v1" in caught.value.rule
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    assert SECRET not in f"{caught.value} {caught.value!r} {caught.value.args}"


def test_bytes_a_model_writes_as_base64_are_accepted() -> None:
    from pydantic import ConfigDict

    class Binary(BaseModel):
        model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")
        data: bytes

    adapter = TypeAdapter(Binary)
    text = encode_payload(adapter, Binary(data=NOT_UTF8), LIMIT)
    assert decode_payload(adapter, text) == Binary(data=NOT_UTF8)
