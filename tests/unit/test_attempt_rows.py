"""The job page's attempt rows, built from records without a database: newest claim first, the
running attempt on top with its lease expiry, each end and next time under the right label,
and durations in a unit that keeps them readable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

from caravel.attempts import AttemptOutcome, AttemptRecord
from caravel.jobs import JobState, JobStatus
from caravel.web.attempts_view import attempt_rows, took

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def _record(token: int, outcome: AttemptOutcome, attempt: int, **fields: object) -> AttemptRecord:
    return AttemptRecord(
        attempt=attempt,
        lease_token=token,
        outcome=outcome,
        worker_id=None,
        host="host-a",
        pid=7,
        claimed_at=T0 + timedelta(minutes=token),
        finished_at=T0 + timedelta(minutes=token, seconds=2),
        **fields,  # type: ignore[arg-type]
    )


def _job(state: JobState, attempt: int) -> JobStatus:
    return JobStatus(
        job_id=uuid4(),
        queue="default",
        tenant_id="acme",
        job_type="demo.v1",
        state=state,
        attempt=attempt,
        max_attempts=5,
        due_at=T0,
        created_at=T0,
        updated_at=T0,
        started_at=T0 + timedelta(minutes=9),
        finished_at=None,
        lease_expires_at=T0 + timedelta(minutes=14),
        last_failure=None,
    )


def test_newest_first_with_the_running_attempt_on_top() -> None:
    records = [
        _record(1, AttemptOutcome.LEASE_EXPIRED, 1, category="LeaseExpired"),
        _record(2, AttemptOutcome.SNOOZED, 2, retry_at=T0 + timedelta(minutes=5)),
        _record(3, AttemptOutcome.FAILED, 2, retry_at=T0 + timedelta(minutes=8)),
    ]
    rows = attempt_rows(_job(JobState.RUNNING, 3), records)

    assert [(r.attempt, r.outcome) for r in rows] == [
        (3, "running"),
        (2, "failed"),
        (2, "snoozed"),
        (1, "lease_expired"),
    ]
    running, failed, snoozed, lost = rows
    assert (running.ended, running.ended_at, running.duration) == (
        "Lease expires",
        T0 + timedelta(minutes=14),
        None,
    )
    assert (failed.ended, failed.again, failed.duration) == ("Finished", "Retry at", "2.0 s")
    assert snoozed.again == "Runs again at"
    assert lost.ended == "Lease ended"


def test_a_finished_job_has_no_running_row() -> None:
    records = [_record(1, AttemptOutcome.COMPLETED, 1)]
    assert [r.outcome for r in attempt_rows(_job(JobState.COMPLETED, 1), records)] == ["completed"]
    assert attempt_rows(_job(JobState.READY, 0), []) == []


def test_durations_read_in_a_fitting_unit() -> None:
    assert took(None) is None
    assert took(timedelta(milliseconds=320)) == "320 ms"
    assert took(timedelta(milliseconds=4_250)) == "4.2 s"
    assert took(timedelta(minutes=3, seconds=10)) == "3 min"
    assert took(timedelta(hours=2, minutes=5)) == "2 h 5 min"
