"""Input at the edges of the limits, the same on every database: keys and payloads of 4-byte
UTF-8 (emoji: 4 bytes each in MariaDB's utf8mb4, PostgreSQL's UTF-8 and SQLite's), NUL inside
a payload's text, a key of exactly the longest length and one character more, and a key that
differs from another only in case or trailing spaces. What is accepted reads back unchanged and
keeps its identity; what is refused is a typed error naming the field and changes nothing."""

from __future__ import annotations

import json

import pytest

from caravel import IdempotencyConflictError, ValidationError
from caravel.limits import MAX_KEY_LENGTH
from tests.support import Add, dispatch, inspector_of, open_queue

ROCKETS = "\U0001f680" * MAX_KEY_LENGTH  # the longest key, four bytes a character


async def test_four_byte_keys_and_payloads_round_trip_and_keep_their_identity(
    db_url: str,
) -> None:
    note = "\U0001f600 a\x00b \u00e9\U00010348"
    async with open_queue(db_url) as queue:
        first = await queue.enqueue(Add(1, note=note), dispatch(ROCKETS, tenant=ROCKETS[:40]))
        again = await queue.enqueue(Add(1, note=note), dispatch(ROCKETS, tenant=ROCKETS[:40]))
        assert (again.job_id, again.already_enqueued) == (first.job_id, True)
        payload = await queue.get_payload(first.job_id, "default", ROCKETS[:40])
        assert payload is not None
        assert json.loads(payload) == {"amount": 1, "note": note}  # every character kept
        # The same key with another payload is a conflict, not a second job.
        with pytest.raises(IdempotencyConflictError):
            await queue.enqueue(Add(2, note=note), dispatch(ROCKETS, tenant=ROCKETS[:40]))
        listed = await inspector_of(queue).list_jobs(tenant_id=ROCKETS[:40])
        assert [status.job_id for status in listed] == [first.job_id]


async def test_keys_differing_in_case_or_trailing_spaces_are_different_keys(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        ids = {
            (await queue.enqueue(Add(1), dispatch(key))).job_id
            for key in ("order-7", "Order-7", "order-7 ", "ORDER-7")
        }
        assert len(ids) == 4  # binary comparison on every database, as keys are exact


async def test_a_key_one_character_too_long_is_refused_and_nothing_is_stored(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        with pytest.raises(ValidationError) as caught:
            await queue.enqueue(Add(1), dispatch(ROCKETS + "x"))
        assert caught.value.field == "idempotency_key"
        assert str(MAX_KEY_LENGTH) in caught.value.rule
        assert await inspector_of(queue).list_jobs() == []
