"""A job registry with a healthy schedule and one whose cron expression croniter cannot
evaluate (31 June), for ``caravel schedules list --app
tests.support.apps.broken_schedule:registry``. Registration refuses such an expression, so it
is put in after the checks, as a croniter release that reads an accepted expression
differently would leave it."""

from __future__ import annotations

from caravel import JobRegistry, Schedule
from tests.support.apps.scheduled import Digest, digest

registry = JobRegistry()
registry.register("tests.digest.v1", Digest, digest)
registry.schedule(Schedule("hourly", Digest("hourly"), queue="emails", cron="@hourly"))
never = Schedule("never", Digest("never"), queue="emails", cron="@daily")
object.__setattr__(never, "cron", "0 9 31 6 *")
registry.schedule(never)
