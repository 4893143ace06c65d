"""Which due jobs a limited claim of a rate-limited queue takes: a pure function over what the
claim read in its transaction (the due candidates in claim order, the running jobs and the
weights started within the window, per partition key), shared by every store.

The window slides: a claim at ``now`` counts every start later than ``now - period``, so the
starts within any window of length ``period`` never weigh more than the rate, at a period's
boundary as anywhere else (a fixed window would let a burst at its end and another at the next
one's start double the rate).

A claim reads its clock before it waits for its turn, so it may run after a claim whose clock
was later. So each claim counts to, and logs its starts at, :func:`window_clock` (its own time
or the latest logged start, whichever is later), and only starts a whole period older than the
latest logged start are deleted (:func:`stale_before`): a late claim's window always finds every
start inside it, and the logged times never go backwards.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Candidate", "Caps", "fit", "stale_before", "started_weights", "window_clock"]

IdT = TypeVar("IdT", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Candidate(Generic[IdT]):
    """A due job: its id, its partition key and its weight."""

    id: IdT
    key: str
    weight: int


@dataclass(frozen=True, slots=True)
class Caps:
    """A queue's stored caps (``None``: no such cap)."""

    concurrency: int | None = None
    per_key: int | None = None
    rate: int | None = None
    rate_per_key: int | None = None


def fit(
    candidates: Iterable[Candidate[IdT]],
    limit: int,
    caps: Caps,
    running: Mapping[str, int],
    started: Mapping[str, int],
) -> list[Candidate[IdT]]:
    """The candidates (in claim order) a claim asking for ``limit`` takes, given the running
    jobs and the weights started within the window by key.

    A job heavier than a rate can never start and is passed over. A job whose key is at its
    concurrency or rate cap closes that key for this claim; the keys behind it go on. A job that
    would take the queue over its overall rate stops the claim: the jobs behind it wait too, so
    a heavy job at the head is not starved by lighter ones."""
    taken: list[Candidate[IdT]] = []
    slots = limit
    if caps.concurrency is not None:
        slots = min(slots, caps.concurrency - sum(running.values()))
    budget = None if caps.rate is None else caps.rate - sum(started.values())
    runs, starts = Counter(running), Counter(started)
    closed: set[str] = set()
    for job in candidates:
        if len(taken) >= slots:
            break
        if (caps.rate is not None and job.weight > caps.rate) or (
            caps.rate_per_key is not None and job.weight > caps.rate_per_key
        ):
            continue
        if job.key in closed:
            continue
        if (caps.per_key is not None and runs[job.key] >= caps.per_key) or (
            caps.rate_per_key is not None and starts[job.key] + job.weight > caps.rate_per_key
        ):
            closed.add(job.key)
            continue
        if budget is not None and job.weight > budget:
            break
        taken.append(job)
        runs[job.key] += 1
        starts[job.key] += job.weight
        if budget is not None:
            budget -= job.weight
    return taken


def window_clock(now: int, latest: int | None) -> int:
    """The time a claim at ``now`` counts its window to and logs its starts at, given the
    queue's latest logged start: never earlier than that start."""
    return now if latest is None or latest < now else latest


def stale_before(latest: int | None, period_ms: int, oldest: int | None) -> int | None:
    """Starts at or before this time are outside the window of every claim from now on (each
    counts to at least ``latest``), given the latest and the oldest logged start; ``None``:
    nothing to delete yet. A claim deletes them only once the oldest is a whole period past
    that time: a window reads only its own rows (by index), so the older ones cost nothing
    until then, and the claims of a busy queue delete a period's starts once per period
    instead of a few at every claim."""
    if latest is None or oldest is None or oldest > latest - 2 * period_ms:
        return None
    return latest - period_ms


def started_weights(starts: Iterable[tuple[str, int]]) -> dict[str, int]:
    """The weights one claim starts, summed per partition key, from its ``(key, weight)`` starts
    in claim order (the keys stay in the order they first start).

    A claim logs all its starts at one time, and a window only ever sums the weights per key,
    so one logged row per key counts exactly as one row per start would: a claim of 500 jobs
    writes one row instead of 500, and every later claim within the window sums that many fewer
    rows."""
    summed: dict[str, int] = {}
    for key, weight in starts:
        summed[key] = summed.get(key, 0) + weight
    return summed
