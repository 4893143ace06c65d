"""The worker's slot accounting, as a property: whatever order several fetchers take slots,
see their claims return and jobs finish in, the slots in use (running plus taken for a claim in
flight) never exceed the concurrency, a fetcher is never offered a negative or zero-sized claim,
and every slot comes back once its jobs end."""

from __future__ import annotations

import asyncio
from uuid import UUID, uuid4

from hypothesis import given, settings
from hypothesis import strategies as st

from caravel.jobs import ClaimedJob, Lease
from caravel.worker.fetcher import Slots


def claimed_job() -> ClaimedJob:
    lease = Lease(uuid4(), 1, 0, 0, 1, 3)
    return ClaimedJob(
        lease=lease,
        queue="q",
        tenant_id="t",
        job_type="x",
        payload="{}",
        due_at_ms=0,
        trace_context=None,
    )


#: One step: ("take", fetcher, wanted), ("return", fetcher, fraction of its taken slots that
#: the claim filled), ("finish", which running job), ("recover", fetcher).
steps = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.integers(0, 3), st.integers(1, 8)),
        st.tuples(st.just("return"), st.integers(0, 3), st.floats(0, 1)),
        st.tuples(st.just("finish"), st.integers(0, 50), st.just(0)),
        st.tuples(st.just("recover"), st.integers(0, 3), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(concurrency=st.integers(1, 6), script=steps)
def test_slots_in_use_never_exceed_the_concurrency(
    concurrency: int, script: list[tuple[str, int, float]]
) -> None:
    async def scenario() -> None:
        releases: dict[UUID, asyncio.Event] = {}

        async def run(job: ClaimedJob) -> None:
            event = releases.setdefault(job.job_id, asyncio.Event())
            await event.wait()

        slots = Slots(concurrency, run)
        # Per fetcher, the slots its claim in flight holds (and whether it looks for an expired
        # lease); a fetcher has one claim in flight at a time, as in the worker.
        in_flight: dict[int, tuple[int, bool]] = {}
        jobs: list[ClaimedJob] = []

        async def finish(job: ClaimedJob) -> None:
            running = len(slots.tasks)
            releases.setdefault(job.job_id, asyncio.Event()).set()
            for _ in range(100):  # a few loop turns: the task wakes and its callback runs
                if len(slots.tasks) < running:
                    return
                await asyncio.sleep(0)  # one turn of the event loop, not time
            raise AssertionError("a finished job kept its slot")

        for action, who, amount in script:
            if action == "take" and who not in in_flight:
                taken = slots.take(int(amount))
                assert 0 <= taken <= amount
                if taken:
                    in_flight[who] = (taken, False)
            elif action == "recover" and who not in in_flight:
                if slots.take_for_recovery():
                    in_flight[who] = (1, True)
            elif action == "return" and who in in_flight:
                taken, recovery = in_flight.pop(who)
                filled = [claimed_job() for _ in range(int(taken * amount))]
                slots.give_back(taken, filled, recovered="q" if recovery else None)
                jobs.extend(filled)
                await asyncio.sleep(0)  # the started tasks begin waiting
            elif action == "finish" and jobs:
                await finish(jobs.pop(int(amount) % len(jobs)))
            in_use = len(slots.tasks) + slots.taken
            assert in_use <= concurrency
            assert slots.free == concurrency - in_use >= 0
            assert slots.taken == sum(n for n, _ in in_flight.values())
            recovering = sum(1 for _, r in in_flight.values() if r)
            assert recovering + (slots.recovering is not None) <= 1

        for who in list(in_flight):
            slots.give_back(in_flight.pop(who)[0], [])
        for job in jobs:
            await finish(job)
        assert slots.free == concurrency
        assert slots.taken == 0

    asyncio.run(scenario())
