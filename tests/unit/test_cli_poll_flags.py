"""``caravel worker --poll-interval``: plain seconds for the worker, QUEUE=SECONDS per queue."""

from __future__ import annotations

from datetime import timedelta

import pytest

from caravel import OptionsError, WorkerOptions
from caravel.cli.flags import FlagError, flag_message
from caravel.cli.worker import FLAGS, poll_flags


def test_plain_and_per_queue_intervals() -> None:
    assert poll_flags([]) == (timedelta(seconds=1), {})
    assert poll_flags(["0.2", "emails=0.5", "a=b=3"]) == (
        timedelta(milliseconds=200),
        {"emails": timedelta(milliseconds=500), "a=b": timedelta(seconds=3)},
    )


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("soon", "--poll-interval must be a number of seconds, or QUEUE=SECONDS"),
        ("=1", "--poll-interval must name a queue before ="),
        ("emails=inf", "--poll-interval must be a finite number of seconds"),
    ],
)
def test_bad_flags_are_refused(given: str, said: str) -> None:
    with pytest.raises(FlagError, match=said):
        poll_flags([given])


def test_a_queue_interval_out_of_range_names_the_flag() -> None:
    _, per_queue = poll_flags(["emails=0.001"])
    with pytest.raises(OptionsError) as raised:
        WorkerOptions(poll_intervals=per_queue)
    assert flag_message(raised.value, FLAGS) == (
        "--poll-interval for queue emails must be from 10 milliseconds to 60 seconds"
    )
