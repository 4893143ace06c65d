"""``AllInserted``: the outcomes of an insert that created every job, read like a list."""

from __future__ import annotations

from caravel._ids import uuid7_many
from caravel.store.protocol import AllInserted, InsertOutcome, NewJob


def _jobs(count: int) -> list[NewJob]:
    return [
        NewJob(job_id, "q", "t.v1", "t", None, "{}", 3, 1, 1)
        for job_id in uuid7_many(1_700_000_000_000, count)
    ]


def test_it_reads_as_the_list_of_inserted_outcomes() -> None:
    jobs = _jobs(3)
    expected = [InsertOutcome(job.id, inserted=True) for job in jobs]

    outcomes = AllInserted(jobs)

    assert len(outcomes) == 3
    assert list(outcomes) == expected
    assert [(o.job_id, o.inserted) for o in outcomes] == [(job.id, True) for job in jobs]
    assert all(type(o) is InsertOutcome for o in outcomes)
    assert outcomes == expected
    assert outcomes[1] == expected[1]
    assert outcomes[-1] == expected[-1]
    assert outcomes[1:] == expected[1:]
    assert outcomes != expected[:2]


def test_an_empty_insert_has_no_outcomes() -> None:
    assert AllInserted([]) == []
    assert not AllInserted([])
