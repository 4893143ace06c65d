"""What only the whole graph can tell: every dependency names a step, there is no cycle, and
the edges stay within :data:`~caravel.limits.MAX_WORKFLOW_EDGES`."""

from __future__ import annotations

from collections.abc import Mapping

from caravel.errors import WorkflowError
from caravel.limits import MAX_WORKFLOW_EDGES
from caravel.workflows.builder import StepSpec

__all__ = ["check_graph"]


def check_graph(steps: Mapping[str, StepSpec]) -> None:
    """Raise :class:`WorkflowError` for the first step (in the order added) that names an
    unknown step, that closes a cycle, or past which the edges exceed their limit."""
    if not steps:
        raise WorkflowError(None, "a workflow has at least one step")
    edges = 0
    for spec in steps.values():
        for name in spec.after:
            dependency = steps.get(name)
            if dependency is None:
                raise WorkflowError(spec.name, f"runs after {name!r}, which is no step")
            edges += len(spec.jobs) * len(dependency.jobs)
        if edges > MAX_WORKFLOW_EDGES:
            rule = f"a workflow has at most {MAX_WORKFLOW_EDGES} dependency edges"
            raise WorkflowError(spec.name, rule)
    _check_acyclic(steps)


def _check_acyclic(steps: Mapping[str, StepSpec]) -> None:
    """A depth-first walk along ``after``; meeting a step still on the walk's path is a cycle,
    reported at that step. Iterative: a chain of 20,000 steps must not exhaust the stack."""
    done: set[str] = set()
    for root in steps:
        if root in done:
            continue
        path: set[str] = {root}
        stack = [(root, iter(steps[root].after))]
        while stack:
            name, pending = stack[-1]
            following = next(pending, None)
            if following is None:
                stack.pop()
                path.discard(name)
                done.add(name)
            elif following in path:
                raise WorkflowError(following, "the steps form a cycle through this step")
            elif following not in done:
                path.add(following)
                stack.append((following, iter(steps[following].after)))
