"""The shared read behind ``/metrics`` (:class:`caravel.web.shared_signal.SharedSignal`) over a
real database: requests arriving while the signal is read share that read, and one read less
than ``max_age`` ago by the queue's clock is answered again. The reader records every read it
makes; the checks are over that record."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from caravel.autoscaling import ScalingSignal
from caravel.errors import ValidationError
from caravel.inspector import QueueInspector
from caravel.testing import ManualClock
from caravel.web.shared_signal import SharedSignal

LOST_AFTER = timedelta(seconds=60)


class RecordingReader(QueueInspector):
    """A real reader that writes down each signal read it makes, by queue."""

    def __init__(self, url: str, clock: ManualClock) -> None:
        super().__init__(url, clock=clock)
        self.reads: list[str | None] = []

    async def scaling_signal(
        self,
        queue: str | None = None,
        *,
        lost_after: timedelta = LOST_AFTER,
        keys: int = 20,
    ) -> ScalingSignal:
        self.reads.append(queue)
        return await super().scaling_signal(queue, lost_after=lost_after, keys=keys)


async def test_requests_during_a_read_share_it(db_url: str) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    async with RecordingReader(db_url, clock) as reader:
        shared = SharedSignal(reader, max_age=timedelta(seconds=1))
        found = await asyncio.gather(
            *(shared.read(None, lost_after=LOST_AFTER, keys=20) for _ in range(20)),
            *(shared.read("emails", lost_after=LOST_AFTER, keys=20) for _ in range(5)),
        )
        assert sorted(reader.reads, key=str) == [None, "emails"]
        assert all(signal is found[0] for signal in found[:20])
        assert [q.queue for q in found[20].queues] == ["emails"]

        await clock.advance(timedelta(milliseconds=999))
        await shared.read(None, lost_after=LOST_AFTER, keys=20)
        assert len(reader.reads) == 2
        await clock.advance(timedelta(milliseconds=1))
        await shared.read(None, lost_after=LOST_AFTER, keys=20)
        assert len(reader.reads) == 3


async def test_without_max_age_every_request_reads(db_url: str) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    async with RecordingReader(db_url, clock) as reader:
        shared = SharedSignal(reader, max_age=timedelta(0))
        await asyncio.gather(*(shared.read(None, lost_after=LOST_AFTER, keys=20) for _ in range(3)))
        assert reader.reads == [None, None, None]


async def test_a_failed_read_is_not_kept(db_url: str) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    async with RecordingReader(db_url, clock) as reader:
        shared = SharedSignal(reader, max_age=timedelta(seconds=1))
        for _ in range(2):
            with pytest.raises(ValidationError, match=r"^queue: "):
                await shared.read("Not A Queue", lost_after=LOST_AFTER, keys=20)
        assert reader.reads == ["Not A Queue", "Not A Queue"]
