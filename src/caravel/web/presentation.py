"""How the dashboard shows things: times, ids, states, durations, payloads, a job's timeline,
and the rendering of a template into a page.

Everything here formats values the pages already read; nothing touches the database.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse

from caravel.clock import Clock, from_ms
from caravel.jobs import FailureCategory, JobState, JobStatus
from caravel.progress import JobProgress
from caravel.store.protocol import QueueLimit
from caravel.web.assets import StaticAsset
from caravel.web.auth import principal_of
from caravel.web.csrf import COOKIE, FIELD, CsrfSigner
from caravel.web.filters import PER_PAGE_CHOICES

__all__ = [
    "FAILURE_MEANINGS",
    "Renderer",
    "TimelineEvent",
    "ago",
    "breakable",
    "due_note",
    "fairness",
    "lease_note",
    "pretty_payload",
    "rate_text",
    "short_id",
    "shown_state",
    "span",
    "timeline",
    "when",
]

FAILURE_MEANINGS = {
    FailureCategory.HANDLER_FAILED.value: "the handler raised an exception",
    FailureCategory.HANDLER_EXITED.value: "the handler called sys.exit() or exit()",
    FailureCategory.INVALID_PAYLOAD.value: "the stored payload did not decode into the job type",
    FailureCategory.UNKNOWN_JOB_TYPE.value: "no handler is registered for this job type",
    FailureCategory.LEASE_EXPIRED.value: "the worker's lease ran out before it acknowledged",
    FailureCategory.RESULT_TOO_LARGE.value: "the handler's result was larger than the queue stores",
    FailureCategory.RESULT_NOT_SERIALIZABLE.value: "the handler returned a value JSON cannot hold",
    FailureCategory.DISCARDED.value: "the handler discarded the job",
    FailureCategory.SNOOZE_LIMIT.value: "the handler snoozed more often than a job may",
    FailureCategory.TIMED_OUT.value: "the attempt ran longer than its execution timeout",
}


def when(moment: datetime | None, now: datetime, *, full: bool = False) -> Markup:
    """A ``<time>`` element: the time of day for today, the date and time otherwise."""
    if moment is None:
        return Markup('<span class="none">\u2014</span>')
    iso = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    complete = f"{moment:%Y-%m-%d %H:%M:%S}"
    shown = complete if full or moment.date() != now.date() else f"{moment:%H:%M:%S}"
    return Markup('<time datetime="{}" title="{} UTC">{}</time>').format(iso, complete, shown)


#: After these a long name may wrap (``reports.monthly-revenue`` -> ``reports.`` ``monthly-``).
_NAME_BREAKS = re.compile(r"(?<=[._-])(?=.)")


def breakable(name: str) -> Markup:
    """``name``, escaped, with a line-break opportunity after each ``.``, ``_`` and ``-``, so a
    long queue name wraps between its parts rather than inside them."""
    return Markup("<wbr>").join(_NAME_BREAKS.split(name))


def fairness(limit: QueueLimit) -> str:
    """Whether a limited queue is claimed fairly: ``—`` when not, ``yes`` when every key takes
    one job per round, ``yes (acme=3, big=2)`` with its weights."""
    if not limit.fair:
        return "\u2014"
    shares = ", ".join(f"{key}={n}" for key, n in limit.weights.items())
    return f"yes ({shares})" if shares else "yes"


def rate_text(limit: QueueLimit) -> str:
    """A queue's rate in a few words: ``—`` without one, ``20 per 1 s``, ``20 per 1 s (5 per
    key)`` or ``5 per key per 60 s``."""
    if limit.rate_period_ms is None:
        return "\u2014"
    period = f"{limit.rate_period_ms / 1000:g} s"
    if limit.rate is None:
        return f"{limit.rate_per_key} per key per {period}"
    each = "" if limit.rate_per_key is None else f" ({limit.rate_per_key} per key)"
    return f"{limit.rate} per {period}{each}"


def short_id(job_id: UUID) -> str:
    """The last 12 hex digits: the random part of a time-ordered (v7) id, so jobs created
    together still look different."""
    return job_id.hex[-12:]


def shown_state(job: JobStatus, now: datetime) -> str:
    """The state to show: :meth:`JobStatus.shown_state <caravel.JobStatus.shown_state>`, the
    words of ``caravel jobs`` and ``caravel status`` too."""
    return job.shown_state(now)


def span(seconds: float) -> str:
    """A duration, in the largest unit that keeps it readable (``42 s``, ``1 h 5 min``)."""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{int(seconds)} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    if seconds < 86_400:
        hours, rest = divmod(int(seconds), 3600)
        return f"{hours} h {rest // 60} min" if rest >= 60 else f"{hours} h"
    return f"{int(seconds // 86_400)} d"


def ago(moment: datetime | None, now: datetime) -> str:
    """How long before (or after) ``now`` a moment is: ``7 min ago``, ``in 5 min``."""
    if moment is None:
        return ""
    seconds = (now - moment).total_seconds()
    if -1 < seconds < 1:
        return "just now"
    return f"{span(seconds)} ago" if seconds > 0 else f"in {span(seconds)}"


def pretty_payload(text: str) -> str:
    """A stored payload indented for reading; text that is not JSON is shown as it is."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def amount(value: int | float) -> str:
    """A progress count for reading: ``1,200``, ``2.5`` (a float to at most 2 decimals)."""
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def progress_text(progress: JobProgress) -> str:
    """A job's progress in words: ``30 of 120 (25%)``, or ``30 done`` without a total."""
    fraction = progress.fraction
    if progress.total is None or fraction is None:
        return f"{amount(progress.done)} done"
    return f"{amount(progress.done)} of {amount(progress.total)} ({math.floor(fraction * 100)}%)"


def meta_rows(meta: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A job's metadata as rows to show: each key with its value as compact JSON."""
    return [
        (key, json.dumps(value, ensure_ascii=False, separators=(", ", ": ")))
        for key, value in meta.items()
    ]


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    label: str
    at: datetime
    note: str


def timeline(job: JobStatus) -> list[TimelineEvent]:
    """What the stored timestamps tell about the job, in time order."""
    events = [TimelineEvent("Created", job.created_at, "enqueued and committed")]
    if not job.held:  # a held job's due time is a marker: it runs when released
        events.append(TimelineEvent("Due", job.due_at, due_note(job)))
    if job.started_at is not None:
        events.append(
            TimelineEvent("Last claimed", job.started_at, f"attempt {job.attempt} started")
        )
    if job.lease_expires_at is not None:
        events.append(TimelineEvent("Lease expires", job.lease_expires_at, "unless renewed"))
    if job.finished_at is not None:
        outcome = "completed" if job.state is JobState.COMPLETED else "moved to dead letter"
        if job.state is JobState.PRUNED:
            outcome = "finished"  # whether it completed or failed went with the pruning
        events.append(TimelineEvent("Finished", job.finished_at, outcome))
    if job.state is JobState.PRUNED:
        note = "payload removed; the tombstone keeps settling its idempotency key"
        events.append(TimelineEvent("Pruned", job.updated_at, note))
    if all(event.at != job.updated_at for event in events):
        events.append(
            TimelineEvent("Last change", job.updated_at, f"state is now {job.state.value}")
        )
    return sorted(events, key=lambda e: e.at)


def due_note(job: JobStatus) -> str:
    """What the due time means for the job's next (or last) attempt."""
    if job.attempt == 0:
        return "runs no earlier than this"
    if job.state is JobState.READY:
        return f"attempt {job.attempt + 1} runs no earlier than this (retry backoff)"
    return f"attempt {job.attempt} was due"


def lease_note(job: JobStatus, now: datetime) -> str | None:
    """The lease of a running job, in a sentence; ``None`` when it is not running."""
    if job.state is not JobState.RUNNING or job.lease_expires_at is None:
        return None
    left = (job.lease_expires_at - now).total_seconds()
    if left > 0:
        return f"Held by a worker; the lease expires in {span(left)}."
    return (
        f"The lease expired {span(left)} ago without an acknowledgement: the next claim takes "
        "the job over (or moves it to dead letter if it has no attempts left)."
    )


def _environment() -> Environment:
    templates = Environment(
        loader=PackageLoader("caravel.web", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    templates.globals.update(
        breakable=breakable,
        fairness=fairness,
        rate_text=rate_text,
        failure_meanings=FAILURE_MEANINGS,
        per_page_choices=PER_PAGE_CHOICES,
        short_id=short_id,
        amount=amount,
        progress_text=progress_text,
        meta_rows=meta_rows,
    )
    return templates


class Renderer:
    """Renders the dashboard's templates into pages: the title, the principal, links below the
    mount point, the anti-forgery token (and its cookie) for operators, and the time helpers
    bound to the queue clock's now."""

    def __init__(
        self,
        *,
        title: str,
        refresh_seconds: int,
        signer: CsrfSigner,
        clock: Clock,
        assets: Mapping[str, StaticAsset],
    ) -> None:
        self.title = title
        self.refresh_seconds = refresh_seconds
        self._signer = signer
        self._clock = clock
        self._assets = assets
        self._templates = _environment()

    @staticmethod
    def base(request: Request) -> str:
        """The mount point's path, without a trailing slash."""
        root: str = request.scope.get("root_path", "")
        return root.rstrip("/")

    def url_builder(self, request: Request) -> Callable[..., str]:
        """``url(path, query, **more)``: a link below the mount point, with the query
        parameters that are not ``None``."""
        base = self.base(request)

        def url(path: str, query: Mapping[str, object] | None = None, **more: object) -> str:
            params = {**(query or {}), **more}
            pairs = [(name, str(value)) for name, value in params.items() if value is not None]
            return base + path + ("?" + urlencode(pairs) if pairs else "")

        return url

    def render(
        self,
        request: Request,
        template: str,
        *,
        status: int = 200,
        refresh: int | None = None,
        **context: Any,
    ) -> HTMLResponse:
        principal = principal_of(request)
        nonce = request.cookies.get(COOKIE)
        fresh_nonce: str | None = None
        csrf: str | None = None
        if principal is not None and principal.can_operate:
            if not self._signer.usable_nonce(nonce):
                nonce = fresh_nonce = self._signer.new_nonce()
            assert nonce is not None
            csrf = self._signer.token(nonce, principal.name)
        now = from_ms(self._clock.now_ms())
        url = self.url_builder(request)

        def static(name: str) -> str:
            return url(f"/static/{name}", v=self._assets[name].version)

        html = self._templates.get_template(template).render(
            title=self.title,
            principal=principal,
            csrf=csrf,
            csrf_field=FIELD,
            now=now,
            ago=lambda moment: ago(moment, now),
            when=lambda moment, full=False: when(moment, now, full=full),
            shown_state=lambda job: shown_state(job, now),
            url=url,
            static=static,
            refresh=self.refresh_seconds if refresh is None else refresh,
            **context,
        )
        response = HTMLResponse(html, status_code=status)
        if fresh_nonce is not None:
            response.set_cookie(
                COOKIE,
                fresh_nonce,
                path=self.base(request) + "/",
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return response

    def error(self, request: Request, status: int, heading: str, message: str) -> HTMLResponse:
        """The error page: a heading and one message, never updating itself."""
        return self.render(
            request,
            "error.html",
            status=status,
            refresh=0,
            nav="",
            page_title=heading,
            message=message,
        )

    def refused(self, reason: str) -> HTMLResponse:
        """The page for a non-local request to a dashboard without ``authorize``. It stands
        alone (no links, no principal): nothing of the dashboard is shown."""
        html = self._templates.get_template("refused.html").render(reason=reason)
        return HTMLResponse(html, status_code=403)
