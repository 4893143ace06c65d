"""Chains and batches as workflows (migration 0022): the graph each one is inserted as, so the
workflow release is theirs too and there is one release path.

- A chain is a workflow whose id is the chain's (its first step's job id), with one step per
  chain step, named by its position (``"0"``, ``"1"``, ...), each later one after the step
  before it, handed its result (``hands_result``) and stopped by its failure (``on_failure``
  ``stop``: a dead-lettered step holds the rest until it is replayed and completes).
- A batch with a callback is a workflow whose id is the batch's: its members are the group
  ``"member"`` (indexed in the order given), its callback the step ``"callback"`` after every
  member, ``on_failure`` ``continue`` (a dead-lettered or cancelled member counts as finished).
  The release hands the callback the batch's counts. A batch without a callback releases
  nothing, so it is no workflow: its members stay plain jobs.

The chain's own rule, that a cancelled step cancels the held steps after it, stays in the
chain's trigger (:mod:`caravel.migrations.release_triggers`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from caravel.store.links.records import LinkedJob, NewBatch
from caravel.store.workflows.records import NewStep, NewWorkflow

__all__ = ["BATCH_WORKFLOW", "CHAIN_WORKFLOW", "batch_workflow", "chain_workflow"]

#: The names chains' and batches' workflows carry (operators see them in workflow listings).
CHAIN_WORKFLOW = "chain"
BATCH_WORKFLOW = "batch"


def _hash(steps: Sequence[NewStep]) -> str:
    """A content hash for the workflow row: chains and batches are keyed by their jobs (a
    chain's first step's key), never by the workflow's, so the ids suffice."""
    digest = hashlib.sha256()
    for step in steps:
        digest.update(step.job.id.bytes)
    return digest.hexdigest()


def chain_workflow(steps: Sequence[LinkedJob]) -> NewWorkflow:
    """The workflow chain ``steps`` (linked by :func:`caravel.chains.link_chain`) is."""
    first = steps[0].job
    new_steps: list[NewStep] = []
    for index, linked in enumerate(steps):
        after = (steps[index - 1].job.id,) if index else ()
        new_steps.append(NewStep(linked.job, str(index), None, after, hands_result=bool(after)))
    return NewWorkflow(
        first.id,
        first.tenant_id,
        CHAIN_WORKFLOW,
        None,
        _hash(new_steps),
        first.created_at,
        new_steps,
    )


def batch_workflow(
    batch: NewBatch, members: Sequence[LinkedJob], callback: LinkedJob | None
) -> NewWorkflow | None:
    """The workflow a batch with a callback is (``None`` without one)."""
    if callback is None:
        return None
    new_steps = [NewStep(one.job, "member", index, ()) for index, one in enumerate(members)]
    after = tuple(one.job.id for one in members)
    new_steps.append(NewStep(callback.job, "callback", None, after, on_failure="continue"))
    return NewWorkflow(
        batch.id,
        batch.tenant_id,
        BATCH_WORKFLOW,
        None,
        _hash(new_steps),
        batch.created_at,
        new_steps,
    )
