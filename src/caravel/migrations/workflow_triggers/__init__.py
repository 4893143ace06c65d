"""The triggers that release a workflow's held steps (migration 0021), one module per dialect,
and the predicates they share.

They fire in the statement that moves a workflow job (``workflow_id`` set) into an end state,
whichever operation that is (an acknowledgement, a claim dead-lettering an expired lease, a
cancel, a replay's later completion). Jobs outside workflows pay nothing: the trigger's ``WHEN``
(MariaDB: its first ``IF``) filters them before any work. What one finish does is bounded by the
finished job's own outgoing edges (primary-key prefix ``parent_id``), never by a step's incoming
ones: a fan-in over 10,000 dependencies costs each of them one edge and one step row.

1. The finished job's unsatisfied edges become satisfied: all of them when it completed; on a
   dead letter or a cancel only those whose child runs after a failure (``on_failure``
   ``continue``). A ``stop`` child keeps its edge, so a replay that completes the job later
   satisfies it then.
2. Each child's ``waiting`` drops by its newly satisfied edges (one per child: ``(parent_id,
   child_id)`` is the key). Concurrent finishers of one fan-in queue on the child's step row, and
   each sees the count the one before it left.
3. A child not released yet (``released_at`` NULL) whose count says it may run, and whose job is
   still held, is released: due at ``now`` plus its delay; or, when only its awaited signal is
   left and it has a timeout, due at ``now`` plus the timeout (it then runs timed out unless the
   signal comes first, :meth:`workflow_signal`). A step handed its dependency's result
   (``hands_result``, a chain's later step) gets ``"result"`` added to its upstream object (a
   chain's step has none before: it then gets ``{"result": ...}`` alone, as before workflows);
   a batch's callback (its step named in ``caravel_batches.callback_id``) is handed the batch's
   counts as ``{"batch": ...}``, counted over the members once, at that release.
"""

from __future__ import annotations

from caravel.limits import HELD_DUE_AT

__all__ = [
    "FINISHED",
    "HELD",
    "REPLAYED",
    "SATISFIES",
    "SATISFIES_EDGE",
    "TAKEN_BACK",
    "batch_outcome",
    "due_after",
    "releasable",
    "with_result",
]

#: A workflow job moving into an end state (a prune's ``pruned`` is not one).
FINISHED = (
    "NEW.workflow_id IS NOT NULL AND OLD.state <> NEW.state"
    " AND NEW.state IN ('completed', 'dead_letter', 'cancelled')"
)
#: A failed workflow job put back to wait (a replay).
REPLAYED = (
    "NEW.workflow_id IS NOT NULL AND OLD.state IN ('dead_letter', 'cancelled')"
    " AND NEW.state NOT IN ('completed', 'dead_letter', 'cancelled', 'pruned')"
)
#: The edges (alias ``e``) out of a replayed job that its failure satisfied, into steps (alias
#: ``c``) not released yet.
TAKEN_BACK = (
    "e.parent_id = NEW.id AND e.satisfied AND e.runs_after_failure AND c.released_at IS NULL"
)
#: Which of the finished job's edges (alias ``e``) its new state satisfies.
SATISFIES = "(NEW.state = 'completed' OR e.runs_after_failure)"
#: :data:`SATISFIES` of the unaliased edge table (a SQLite trigger's UPDATE takes no alias).
SATISFIES_EDGE = "(NEW.state = 'completed' OR caravel_workflow_edges.runs_after_failure)"
#: A job still held back (``caravel_jobs`` unaliased).
HELD = f"state = 'ready' AND due_at = {HELD_DUE_AT}"


def releasable(step: str) -> str:
    """Whether the step row ``step`` (an alias) may be released now: nothing left to wait for,
    or only its signal, with a timeout."""
    return (
        f"{step}.released_at IS NULL AND ({step}.waiting = 0 OR ({step}.waiting = 1"
        f" AND {step}.wait_signal IS NOT NULL AND {step}.signal_received_at IS NULL"
        f" AND {step}.timeout_ms IS NOT NULL))"
    )


def due_after(step: str) -> str:
    """How long after its release step ``step`` is due: its delay, or its signal's timeout."""
    return (
        f"CASE WHEN {step}.waiting = 0 THEN COALESCE({step}.delay_ms, 0) ELSE {step}.timeout_ms END"
    )


def with_result(concat: str, job: str) -> str:
    """The upstream of the released job ``job`` (an alias or the table's name): with
    ``"result"`` (its ``hands_result`` dependency's) first when it has such an edge, else as it
    was. ``concat`` joins texts (``a || b`` or ``CONCAT(a, b)``, as ``"{0} || {1}"``)."""
    # A NULL upstream (a chain's step) makes the tail NULL: the object is the result alone.
    tail = f"COALESCE({concat.format(repr(','), f'SUBSTR({job}.upstream, 2)')}, '}}')"
    inner = concat.format(concat.format("'{\"result\":'", "COALESCE(p.result, 'null')"), tail)
    return (
        f"COALESCE((SELECT {inner} FROM caravel_workflow_edges AS h"
        " JOIN caravel_jobs AS p ON p.id = h.parent_id"
        f" WHERE h.child_id = {job}.id AND h.hands_result LIMIT 1), {job}.upstream)"
    )


def batch_outcome(json_object: str, job: str, as_text: str = "") -> str:
    """The upstream of the released job ``job`` when it is a batch's callback: the batch's
    counts when its last member finished, counted over the members (``ix_caravel_jobs_batch``)
    once, here, rather than on every member's finish; NULL for any other step (one primary-key
    lookup). ``json_object`` is the dialect's JSON object builder (``json_build_object`` or
    ``json_object``); ``as_text`` casts its value to text where it is not (``::text``)."""

    def counted(state: str) -> str:
        return f"'{state}', count(CASE WHEN m.state = '{state}' THEN 1 END)"

    counts = ", ".join(counted(state) for state in ("completed", "dead_letter", "cancelled"))
    return (
        f"(SELECT {json_object}('batch', {json_object}('batch_id', b.id, 'total', b.total,"
        f" {counts})){as_text} FROM caravel_batches AS b"
        " LEFT JOIN caravel_jobs AS m ON m.batch_id = b.id"
        f" WHERE b.id = {job}.workflow_id AND b.callback_id = {job}.id GROUP BY b.id, b.total)"
    )
