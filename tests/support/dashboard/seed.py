"""A queue database with a believable last hour, built through the real queue API with a clock
moved by hand: completed jobs spread over the hour, dead letters of every failure category,
ready, delayed and running jobs, one expired lease, and workers that run, stopped and got lost.

:func:`seed` records what it did in :class:`Seeded`, so tests compare the dashboard with what
was done, not with what the database says. The browser tests, the HTTP tests and
``scripts/screenshots.py`` all use it.
"""

from __future__ import annotations

import socket
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from caravel import (
    DatabaseQueue,
    DispatchOptions,
    FailureCategory,
    JobContext,
    JobRegistry,
    Leases,
    QueueOptions,
)
from caravel.store.protocol import Heartbeat, WorkerRecord
from caravel.testing import ManualClock

#: A tenant id and a payload text that would run script if the dashboard did not escape them.
XSS_TENANT = '<img src=x onerror="window.__xss=1">'
XSS_NOTE = "</script><script>window.__xss=2</script><b onmouseover=alert(3)>bold</b>"

END = datetime(2030, 1, 1, 12, 2, 30, tzinfo=UTC)
LEASE = timedelta(minutes=5)


@dataclass(frozen=True)
class SendEmail:
    to: str
    template: str
    note: str = ""


@dataclass(frozen=True)
class GenerateReport:
    report_id: str
    pages: int = 1


@dataclass(frozen=True)
class DeliverWebhook:
    endpoint: str
    event: str


@dataclass(frozen=True)
class IssueInvoice:
    invoice_id: str
    amount_cents: int


registry = JobRegistry()
ran: list[str] = []


@registry.handles("emails.send.v1", SendEmail)
async def send_email(job: SendEmail, ctx: JobContext[None]) -> None:
    ran.append(str(ctx.job_id))


@registry.handles("reports.generate.v1", GenerateReport)
async def generate_report(job: GenerateReport, ctx: JobContext[None]) -> None:
    ran.append(str(ctx.job_id))


@registry.handles("webhooks.deliver.v1", DeliverWebhook)
async def deliver_webhook(job: DeliverWebhook, ctx: JobContext[None]) -> None:
    ran.append(str(ctx.job_id))


@registry.handles("billing.invoice.v1", IssueInvoice)
async def issue_invoice(job: IssueInvoice, ctx: JobContext[None]) -> None:
    ran.append(str(ctx.job_id))


QUEUES = ("billing.invoices", "emails", "reports", "webhooks")
STATES = ("ready", "delayed", "running", "expired", "dead_letter", "completed")


@dataclass(frozen=True)
class JobRef:
    job_id: uuid.UUID
    queue: str
    tenant_id: str
    job_type: str
    category: str | None = None


@dataclass
class Seeded:
    """What the seed did: counts per queue and state, and the jobs tests look for."""

    end: datetime
    counts: dict[str, Counter[str]] = field(default_factory=lambda: {q: Counter() for q in QUEUES})
    dead: list[JobRef] = field(default_factory=list)
    completed: list[JobRef] = field(default_factory=list)
    xss_job: JobRef | None = None
    retrying: JobRef | None = None
    running: JobRef | None = None
    workers: dict[str, str] = field(default_factory=dict)

    def total(self, state: str) -> int:
        return sum(c[state] for c in self.counts.values())


def _job(queue: str, n: int, note: str = "") -> object:
    if queue == "emails":
        return SendEmail(to=f"user{n}@example.com", template="welcome", note=note)
    if queue == "reports":
        return GenerateReport(report_id=f"r-{n:04d}", pages=1 + n % 7)
    if queue == "webhooks":
        return DeliverWebhook(endpoint=f"https://hooks.example.com/{n}", event="order.paid")
    return IssueInvoice(invoice_id=f"inv-{n:05d}", amount_cents=1000 + 37 * n)


def _tenant(n: int) -> str:
    return ("acme", "globex", "initech", "umbrella")[n % 4]


# Completed jobs per minute for each queue, and the minutes (back from the end) when a job of
# the queue used its last attempt, with the failure category.
_PATTERN = {
    "billing.invoices": lambda m: 1 if m % 6 == 0 else 0,
    "emails": lambda m: 2 + (m % 5 == 0) + (m % 3 == 0),
    "reports": lambda m: 1 if m % 4 == 0 else 0,
    "webhooks": lambda m: 1 + (m % 2),
}
_FAILURES = {
    "emails": {44: "HandlerFailed", 23: "HandlerFailed", 8: "InvalidPayload"},
    "reports": {31: "HandlerFailed", 9: "UnknownJobType"},
    "webhooks": {37: "UnknownJobType", 15: "HandlerFailed", 4: "HandlerFailed"},
    "billing.invoices": {27: "InvalidPayload"},
}


async def seed(url: str, *, end: datetime = END, small: bool = False, probe: bool = True) -> Seeded:
    """Fill the migrated, empty queue at ``url`` so that the dashboard, read at ``end``, shows
    the last hour. ``small`` seeds only the last 10 minutes of history, sparsely (faster
    tests); ``probe=False`` leaves out the markup probe (for the docs' screenshots)."""
    done = Seeded(end=end)
    counter = iter(range(1, 100_000))
    first_minute = 10 if small else 50
    clock = ManualClock(end - timedelta(minutes=first_minute))
    options = QueueOptions(lease_duration=LEASE)
    async with DatabaseQueue(url, registry, options=options, clock=clock) as queue:

        async def finish(q: str, category: str | None, tenant: str, note: str = "") -> JobRef:
            n = next(counter)
            dispatch = DispatchOptions(
                queue=q, tenant_id=tenant, max_attempts=1 if category else None
            )
            accepted = await queue.enqueue(_job(q, n, note), dispatch)
            await clock.advance(timedelta(seconds=3))
            (claimed,) = await Leases(queue).claim_many(q, 1)
            assert claimed.job_id == accepted.job_id
            await clock.advance(timedelta(seconds=2))
            job_type = claimed.job_type
            ref = JobRef(accepted.job_id, q, tenant, job_type, category)
            if category is None:
                await Leases(queue).complete(claimed.lease)
                done.counts[q]["completed"] += 1
                done.completed.append(ref)
            else:
                outcome = await Leases(queue).fail(claimed.lease, category)
                assert outcome.dead_lettered
                done.counts[q]["dead_letter"] += 1
                done.dead.append(ref)
            return ref

        for back in range(first_minute, 0, -1):
            for q in QUEUES:
                runs = _PATTERN[q](back) if not small else int(back % 3 == 0)
                for _ in range(runs):
                    await finish(q, None, _tenant(next(counter)))
                category = _FAILURES[q].get(back)
                if category is not None:
                    await finish(q, category, _tenant(back))
            if back == 6 and probe:
                # The probe: a dead letter whose tenant id and payload hold markup.
                done.xss_job = await finish(
                    "emails", FailureCategory.HANDLER_FAILED.value, XSS_TENANT, XSS_NOTE
                )
            if back > 1:
                await clock.set(end - timedelta(minutes=back - 1))

        # A job that failed once and waits for its retry (ready again, attempt 1 of 3).
        await clock.set(end - timedelta(seconds=40))
        accepted = await queue.enqueue(
            _job("reports", 9001), DispatchOptions(queue="reports", tenant_id="globex")
        )
        (claimed,) = await Leases(queue).claim_many("reports", 1)
        await Leases(queue).fail(claimed.lease, FailureCategory.HANDLER_FAILED.value)
        done.retrying = JobRef(accepted.job_id, "reports", "globex", claimed.job_type)
        done.counts["reports"]["ready"] += 1
        await clock.set(end)

        # Running under a live lease.
        accepted = await queue.enqueue(
            _job("emails", 9002), DispatchOptions(queue="emails", tenant_id="acme")
        )
        (claimed,) = await Leases(queue).claim_many("emails", 1)
        done.running = JobRef(accepted.job_id, "emails", "acme", claimed.job_type)
        done.counts["emails"]["running"] += 1

        # Waiting: due now, and delayed.
        for q, ready, delayed in (("emails", 4, 2), ("reports", 2, 1), ("billing.invoices", 1, 3)):
            for _ in range(ready):
                await queue.enqueue(
                    _job(q, next(counter)), DispatchOptions(queue=q, tenant_id="initech")
                )
                done.counts[q]["ready"] += 1
            for _ in range(delayed):
                await queue.enqueue(
                    _job(q, next(counter)),
                    DispatchOptions(
                        queue=q, tenant_id="initech", not_before=end + timedelta(minutes=15)
                    ),
                )
                done.counts[q]["delayed"] += 1

    # An expired lease, and a dead letter whose last lease expired (LeaseExpired): claimed by a
    # worker that then vanished. Written with a clock that was earlier, as that worker's was.
    past = ManualClock(end - timedelta(minutes=12))
    async with DatabaseQueue(url, registry, options=options, clock=past) as queue:
        lost = await queue.enqueue(
            _job("webhooks", 9003),
            DispatchOptions(queue="webhooks", tenant_id="umbrella", max_attempts=1),
        )
        await Leases(queue).claim_many("webhooks", 1)
        await past.set(end - timedelta(minutes=6))
        await queue.enqueue(
            _job("webhooks", 9004), DispatchOptions(queue="webhooks", tenant_id="umbrella")
        )
        (claimed,) = await Leases(queue).claim_many(
            "webhooks", 1
        )  # dead-letters the first on the way
        done.dead.append(
            JobRef(lost.job_id, "webhooks", "umbrella", "webhooks.deliver.v1", "LeaseExpired")
        )
        done.counts["webhooks"]["dead_letter"] += 1
        done.counts["webhooks"]["expired"] += 1

        # The worker registry: one running, one lost, one stopped.
        host = socket.gethostname()
        now = ManualClock(end).now_ms()
        minute = 60_000
        for name, started, beat, stopped, queues in (
            ("running", now - 55 * minute, now - 4_000, None, ("emails", "reports")),
            ("lost", now - 50 * minute, now - 7 * minute, None, ("webhooks",)),
            ("stopped", now - 58 * minute, now - 20 * minute, now - 20 * minute, ("reports",)),
        ):
            worker_id = uuid.uuid4()
            await queue.store.worker_register(
                WorkerRecord(
                    id=worker_id,
                    host=f"{host}-{name}" if name != "running" else host,
                    pid=4000 + len(done.workers),
                    queues=queues,
                    concurrency=8 if name == "running" else 4,
                    started_at=started,
                    heartbeat_at=started,
                    in_flight=0,
                )
            )
            await queue.store.worker_heartbeat(
                Heartbeat(worker_id, beat, 1 if name != "stopped" else 0, stopped is not None)
            )
            done.workers[name] = str(worker_id)
    return done


#: Queues with long names (64 characters is the most a queue name may have), for the layout
#: tests: one paused, each with thousands of jobs waiting.
LONG_QUEUES = (
    "notifications.transactional-email.high-priority.eu-west-1",
    "reports.monthly-revenue-reconciliation.finance-team",
    "partnerwebhookdeliveriesforthelegacyorderingsystemretriesqueue01",
    "integrations.partner-webhooks.retry.europe-west.shard-0001.green",
)


async def seed_long_queues(url: str, *, end: datetime = END) -> dict[str, Counter[str]]:
    """Add :data:`LONG_QUEUES` to the queue at ``url``: thousands of jobs due, hundreds
    delayed, and the first queue paused. Returns the counts per queue and state."""
    counts: dict[str, Counter[str]] = {}
    async with DatabaseQueue(url, registry, clock=ManualClock(end)) as queue:
        for n, name in enumerate(LONG_QUEUES):
            ready, delayed = 1_000 + 1_234 * n, 100 + 321 * n
            later = end + timedelta(hours=n + 1)
            await queue.enqueue_many(
                [
                    (_job("emails", i), DispatchOptions(queue=name, tenant_id=_tenant(i)))
                    for i in range(ready)
                ]
                + [
                    (
                        _job("reports", i),
                        DispatchOptions(queue=name, tenant_id=_tenant(i), not_before=later),
                    )
                    for i in range(delayed)
                ]
            )
            counts[name] = Counter(ready=ready, delayed=delayed)
        await queue.pause_queue(LONG_QUEUES[0])
    return counts
