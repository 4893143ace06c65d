"""``assert_enqueued``, ``refute_enqueued`` and ``all_enqueued`` on every database: matching by
wire name or type, payload subset or job value, queue, tenant, state and delay, and failure
messages that list what was enqueued instead."""

from __future__ import annotations

from datetime import timedelta

import pytest

from caravel import DispatchOptions, JobState, ValidationError
from caravel.testing import ManualClock, all_enqueued, assert_enqueued, drain, refute_enqueued
from tests.support import Add, Report, open_queue, registry_for


async def test_assert_enqueued_finds_a_job_by_wire_name_or_type_and_payload(db_url: str) -> None:
    async with open_queue(db_url, registry_for()) as queue:
        accepted = await queue.enqueue(Add(2, note="hi"), DispatchOptions(queue="math"))
        found = await assert_enqueued(queue, "tests.add.v1")
        assert found.job_id == accepted.job_id
        assert found.payload == {"amount": 2, "note": "hi"}
        assert (found.queue, found.tenant_id, found.state) == ("math", "default", JobState.READY)
        await assert_enqueued(queue, Add, payload={"amount": 2})
        await assert_enqueued(queue, Add, payload=Add(2, note="hi"), queue_name="math")
        await assert_enqueued(queue, Add, tenant_id="default", state=JobState.READY, count=1)


async def test_nested_payload_mappings_match_as_subsets(db_url: str) -> None:
    registry = registry_for(report=lambda job, ctx: None)
    async with open_queue(db_url, registry) as queue:
        await queue.enqueue(Report(report_id="r1", pages=[1, 2]), DispatchOptions(queue="r"))
        await assert_enqueued(queue, Report, payload={"report_id": "r1"})
        await assert_enqueued(queue, Report, payload={"pages": [1, 2]})
        with pytest.raises(AssertionError):
            await assert_enqueued(queue, Report, payload={"pages": [1]})


async def test_a_delay_matches_the_due_time_after_the_enqueue(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, registry_for(), clock=clock) as queue:
        due = clock.now() + timedelta(minutes=5)
        await queue.enqueue(Add(1), DispatchOptions(queue="later", not_before=due))
        found = await assert_enqueued(queue, Add, delay=timedelta(minutes=5))
        assert found.due_at == due
        await assert_enqueued(queue, Add, due_at=due)
        await refute_enqueued(queue, Add, delay=timedelta(0))


async def test_the_failure_message_lists_what_was_enqueued_instead(db_url: str) -> None:
    async with open_queue(db_url, registry_for()) as queue:
        await queue.enqueue(Add(1, note="one"), DispatchOptions(queue="math", tenant_id="t-1"))
        with pytest.raises(AssertionError) as caught:
            await assert_enqueued(queue, Add, payload={"amount": 9}, queue_name="math")
    message = str(caught.value)
    assert message.startswith(
        "expected a job 'tests.add.v1' queue=math payload containing {\"amount\":9}, found none;"
    )
    assert "enqueued were (1):" in message
    assert "tests.add.v1 queue=math tenant=t-1 state=ready due=" in message
    assert 'payload={"amount":1,"note":"one"}' in message


async def test_the_failure_message_says_when_nothing_was_enqueued(db_url: str) -> None:
    async with open_queue(db_url, registry_for()) as queue:
        with pytest.raises(AssertionError, match=r"found none; nothing was enqueued$"):
            await assert_enqueued(queue, "tests.add.v1")


async def test_count_asks_for_exactly_that_many(db_url: str) -> None:
    async with open_queue(db_url, registry_for()) as queue:
        await queue.enqueue_many([(Add(1), DispatchOptions(queue="q"))] * 2)
        await assert_enqueued(queue, Add, count=2)
        with pytest.raises(
            AssertionError, match=r"expected exactly 3 jobs 'tests\.add\.v1', found 2"
        ):
            await assert_enqueued(queue, Add, count=3)


async def test_refute_enqueued_lists_the_jobs_that_matched(db_url: str) -> None:
    async with open_queue(db_url, registry_for()) as queue:
        await refute_enqueued(queue)
        await queue.enqueue(Add(4), DispatchOptions(queue="math"))
        await refute_enqueued(queue, Add, queue_name="other")
        await refute_enqueued(queue, Add, payload={"amount": 5})
        with pytest.raises(AssertionError) as caught:
            await refute_enqueued(queue, Add, payload={"amount": 4})
    assert "expected no job 'tests.add.v1' payload containing" in str(caught.value)
    assert "found 1:\n  - tests.add.v1 queue=math" in str(caught.value)


async def test_all_enqueued_lists_matches_oldest_first_in_any_state(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, registry_for(), clock=clock) as queue:
        first = await queue.enqueue(Add(1), DispatchOptions(queue="a"))
        await clock.advance(timedelta(milliseconds=1))  # ids within one millisecond are unordered
        await queue.enqueue(Add(2), DispatchOptions(queue="b"))
        await drain(queue, queues=["a"])
        everything = await all_enqueued(queue)
        assert [job.payload["amount"] for job in everything] == [1, 2]
        done = await all_enqueued(queue, Add, state=JobState.COMPLETED)
        assert [job.job_id for job in done] == [first.job_id]
        assert await all_enqueued(queue, "tests.other.v1") == []


async def test_a_type_that_is_not_registered_is_refused(db_url: str) -> None:
    async with open_queue(db_url, registry_for()) as queue:
        with pytest.raises(ValidationError, match="job: must be a wire name or a payload type"):
            await assert_enqueued(queue, Report)
