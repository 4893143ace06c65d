"""The JetStream adapter's options: each refused value names its field and the rule, and the
dead-letter subject is the message's own with ``.dlq`` unless one is configured."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from caravel.bridge.nats import JetStreamOptions
from caravel.cli.bridge import FlagError, broker_options, nats_options
from caravel.errors import OptionsError


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"stream": "has.dot"}, "stream"),
        ({"stream": ""}, "stream"),
        ({"stream": "S", "subjects": ["a.b"]}, "subjects"),
        ({"subjects": ("a.b",)}, "subjects"),
        ({"stream": "S", "subjects": ("a..b",)}, "subjects"),
        ({"stream": "S", "subjects": ("a.>.b",)}, "subjects"),
        ({"duplicate_window": timedelta(0)}, "duplicate_window"),
        ({"duplicate_window": timedelta(days=2)}, "duplicate_window"),
        ({"ack_wait": timedelta(milliseconds=10)}, "ack_wait"),
        ({"publish_timeout": 5}, "publish_timeout"),
        ({"dead_letter_subject": "dead.*"}, "dead_letter_subject"),
        ({"filter_subject": "a b"}, "filter_subject"),
    ],
)
def test_a_bad_option_names_its_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(OptionsError) as caught:
        JetStreamOptions(**options)
    assert caught.value.field == field


def test_dead_letters_go_to_the_subject_and_dlq_unless_configured() -> None:
    assert JetStreamOptions().dead_letters_for("shop.orders.placed") == "shop.orders.placed.dlq"
    configured = JetStreamOptions(dead_letter_subject="shop-dead")
    assert configured.dead_letters_for("shop.orders.placed") == "shop-dead"


def test_the_nats_flags_become_options_and_only_for_nats() -> None:
    given = nats_options(stream="S", subject=["a.*"], duplicate_window=60.0, ack_wait=5.0)
    assert given == {
        "stream": "S",
        "subjects": ("a.*",),
        "duplicate_window": timedelta(seconds=60),
        "ack_wait": timedelta(seconds=5),
    }
    assert nats_options() == {}
    options = broker_options(
        "nats://127.0.0.1:4222", declare=False, bind=[], dead_letter_exchange=None, nats=given
    )
    assert options == {"declare": False, **given}
    JetStreamOptions(**options)  # what the adapter is opened with
    with pytest.raises(FlagError, match="for nats:// brokers only"):
        broker_options("amqp://h/", declare=True, bind=[], dead_letter_exchange=None, nats=given)
