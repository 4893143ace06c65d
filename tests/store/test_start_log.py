"""A rate-limited claim logs its starts as one row per partition key, with their summed weight:
a claim of many jobs writes a handful of rows, and every claim after it within the window sums
that many fewer (what a window counts is the same; the conformance suite checks that)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from caravel.flow import RateLimit
from caravel.flow.window import started_weights
from caravel.store import open_store
from caravel.store.base import SqlStore
from caravel.store.schema import queue_starts
from tests.store.conformance.builders import QUEUE, T0, claim, insert, new_job
from tests.support.databases import SqliteTemplate


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqlStore]:
    if request.param == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        url = template.copy_to(tmp_path / "queue.db")
    else:
        url = request.getfixturevalue("mariadb_url" if request.param == "mariadb" else "pg_url")
    opened = open_store(url)
    inner = opened.inner
    assert isinstance(inner, SqlStore)
    try:
        yield inner
    finally:
        await opened.close()


async def test_a_claim_logs_one_start_row_per_key_with_the_summed_weight(store: SqlStore) -> None:
    await store.queue_limit_set(RateLimit(queue=QUEUE, rate=1000), T0)
    keys = ["a", "b", "c"]
    jobs = [
        new_job(n, partition_key=keys[n % 3], weight=1 + n % 2, created_at=T0 + n)
        for n in range(30)
    ]
    await insert(store, jobs)

    claimed = (await claim(store, T0 + 100, 30, limited=True)).claimed

    assert len(claimed) == 30
    async with store.engine.connect() as conn:
        rows = (await conn.execute(sa.select(queue_starts.c["key", "started_at", "weight"]))).all()
    expected = {"a": 15, "b": 15, "c": 15}  # ten jobs each: five of weight 1, five of weight 2
    assert sorted((row.key, row.weight) for row in rows) == sorted(expected.items())
    assert {row.started_at for row in rows} == {T0 + 100}


def test_started_weights_sums_each_key_in_the_order_it_first_starts() -> None:
    assert started_weights([("b", 2), ("a", 1), ("b", 5), ("c", 1), ("a", 1)]) == {
        "b": 7,
        "a": 2,
        "c": 1,
    }
    assert list(started_weights([("b", 2), ("a", 1), ("b", 5)])) == ["b", "a"]
    assert started_weights([]) == {}
