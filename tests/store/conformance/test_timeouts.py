"""Per-job execution timeouts: the ``timeout_ms`` a dispatch gave a job is stored by every
insert path (one job, many, a chain, a batch) and handed back by every claim, a takeover of an
expired lease and a retry's included; a job without one is claimed with ``None`` (its type's
timeout applies, which the store never sees)."""

from __future__ import annotations

import pytest

from caravel.store.protocol import Store
from tests.store.conformance.builders import (
    LEASE_MS,
    T0,
    chain,
    claim,
    claim_one,
    fail,
    insert,
    insert_batch,
    new_job,
)

#: Sizes across every insert strategy a store may pick (see test_insert.py).
SIZES = [1, 5, 20, 600]


def _timeout(n: int) -> int | None:
    """Every third job has no timeout of its own; the others differ, up to 7 days."""
    return None if n % 3 == 0 else (n * 1_000 + 1 if n % 3 == 1 else 7 * 86_400_000)


@pytest.mark.parametrize("size", SIZES)
async def test_every_insert_strategy_stores_the_timeout_and_the_claim_returns_it(
    store: Store, size: int
) -> None:
    jobs = [new_job(n, due_at=T0 + n)._replace(timeout_ms=_timeout(n)) for n in range(size)]
    await insert(store, jobs)

    claimed = (await claim(store, T0 + size, size)).claimed

    assert {job.job_id: job.timeout_ms for job in claimed} == {
        job.id: job.timeout_ms for job in jobs
    }


async def test_a_takeover_and_a_retry_keep_the_timeout(store: Store) -> None:
    job = new_job(1)._replace(timeout_ms=2_500)
    await insert(store, [job])
    first = await claim_one(store, T0)
    assert first.timeout_ms == 2_500

    taken_over = await claim_one(store, T0 + LEASE_MS, source="expired")
    assert (taken_over.attempt, taken_over.timeout_ms) == (2, 2_500)

    await fail(store, taken_over.lease, T0 + LEASE_MS + 1, retry_at=T0 + LEASE_MS + 10)
    retried = await claim_one(store, T0 + LEASE_MS + 10)
    assert (retried.attempt, retried.timeout_ms) == (3, 2_500)


async def test_chain_steps_and_batch_jobs_keep_their_own_timeouts(store: Store) -> None:
    first = new_job(1)._replace(timeout_ms=1_000)
    second = new_job(2)  # none of its own
    await store.chain_insert(chain([first, second]))
    member = new_job(3, due_at=T0 + 1)._replace(timeout_ms=3_000)
    await insert_batch(store, [member])

    claimed = (await claim(store, T0 + 1, 10)).claimed

    assert {job.job_id: job.timeout_ms for job in claimed} == {first.id: 1_000, member.id: 3_000}
