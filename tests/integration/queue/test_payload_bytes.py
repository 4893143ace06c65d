"""A payload field of type ``bytes`` at enqueue, on every database: UTF-8 bytes are stored as
text, other bytes are a ValidationError naming the field and the job type, and nothing of the
call is written."""

from __future__ import annotations

import dataclasses

import pytest

from caravel import DispatchOptions, JobRegistry, ValidationError
from tests.support import Add, inspector_of, noop, open_queue

WIRE = "tests.file.v1"
QUEUE = "files"
SECRET = "zq-bytes-canary"


@dataclasses.dataclass(frozen=True)
class StoredFile:
    name: str
    content: bytes


def _registry() -> JobRegistry:
    registry = JobRegistry()
    registry.register(WIRE, StoredFile, noop)
    registry.register("tests.add.v1", Add, noop)
    return registry


async def test_utf8_bytes_are_enqueued_as_text(db_url: str) -> None:
    async with open_queue(db_url, _registry()) as queue:
        result = await queue.enqueue(
            StoredFile("a.txt", "hé".encode()), DispatchOptions(queue=QUEUE)
        )
        assert await queue.get_payload(result.job_id, QUEUE) == '{"content":"hé","name":"a.txt"}'


async def test_bytes_that_are_not_utf8_name_the_field_and_nothing_is_written(db_url: str) -> None:
    bad = StoredFile("a.bin", b"\x89PNG\r\n\x1a\n" + SECRET.encode())
    async with open_queue(db_url, _registry()) as queue:
        with pytest.raises(ValidationError) as caught:
            await queue.enqueue(bad, DispatchOptions(queue=QUEUE))
        assert caught.value.field == "payload.content"
        assert WIRE in str(caught.value)
        assert "UTF-8" in str(caught.value)
        assert SECRET not in str(caught.value)

        # In a batch, the one bad job keeps the good ones out too.
        with pytest.raises(ValidationError) as caught:
            await queue.enqueue_many(
                [
                    (Add(1), DispatchOptions(queue=QUEUE)),
                    (bad, DispatchOptions(queue=QUEUE)),
                ]
            )
        assert caught.value.field == "payload.content"
        assert await inspector_of(queue).list_jobs() == []
