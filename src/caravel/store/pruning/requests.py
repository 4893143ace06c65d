"""The parameters and result of one prune batch (:meth:`~caravel.store.protocol.Store.job_prune`),
apart from the protocol module so that it stays one screenful of the seam."""

from __future__ import annotations

from dataclasses import dataclass

from caravel.jobs import JobState

__all__ = ["PruneBatch", "PruneRequest"]


@dataclass(frozen=True, slots=True)
class PruneRequest:
    """One prune batch at ``now``: finished jobs of ``queue`` (or of every queue) whose end
    state's cutoff is set and who finished before it go (keyed ones become tombstones, others
    are deleted), and tombstones pruned before ``tombstones_before`` are deleted; at most
    ``limit`` rows in all. ``dry_run`` counts everything that would go instead, unbounded."""

    now: int
    limit: int
    queue: str | None = None
    completed_before: int | None = None
    cancelled_before: int | None = None
    dead_letter_before: int | None = None
    tombstones_before: int | None = None
    dry_run: bool = False

    def cutoffs(self) -> list[tuple[JobState, int]]:
        """The end states this request prunes, each with its cutoff."""
        found = (
            (JobState.COMPLETED, self.completed_before),
            (JobState.CANCELLED, self.cancelled_before),
            (JobState.DEAD_LETTER, self.dead_letter_before),
        )
        return [(state, cutoff) for state, cutoff in found if cutoff is not None]


@dataclass(frozen=True, slots=True)
class PruneBatch:
    """What one prune batch did (or, for a dry run, would do): jobs deleted outright (no key),
    keyed jobs turned into tombstones, expired tombstones deleted. ``busy``: another pruner held
    the queue's prune lock, so this batch did nothing."""

    deleted: int = 0
    tombstoned: int = 0
    tombstones_deleted: int = 0
    busy: bool = False

    @property
    def total(self) -> int:
        return self.deleted + self.tombstoned + self.tombstones_deleted
