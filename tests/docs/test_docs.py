"""Every fenced block of README.md and docs/ is either run or marked as not meant to run.

The convention is in tests/README.md ("The docs suite"). A test id is the block's page and line
(``docs/tutorial.md:19``), with ``[postgresql]`` or ``[mariadb]`` for the run on that server of a
block marked so."""

from __future__ import annotations

import ast

import pytest

from tests.docs.blocks import SERVERS, Block, all_blocks, parse
from tests.docs.conftest import PageRuns
from tests.docs.runner import ROOT, BlockFailed
from tests.support.jetstream import require_nats
from tests.support.rabbitmq import rabbitmq_available

BLOCKS = all_blocks()

#: A page whose runnable blocks reach a broker needs its server: the page's tests skip without
#: it, and fail under ``CI=true``, as a database's do.
BROKERS = {"amqp://": rabbitmq_available, "nats://": require_nats}


def _check_brokers(page: str) -> None:
    runnable = [b.text for b in parse(ROOT / page) if b.not_run is None]
    for scheme, available in BROKERS.items():
        if any(scheme in text for text in runnable):
            available()


def _params() -> list[object]:
    params: list[object] = []
    for block in BLOCKS:
        marks = [pytest.mark.xdist_group(f"docs:{block.page}")]
        if "slow" in block.options:
            marks.append(pytest.mark.slow)
        params.append(pytest.param(block, "sqlite", id=block.id, marks=marks))
        for server in SERVERS:
            if server in block.options:
                server_mark = (
                    pytest.mark.postgres if server == "postgresql" else pytest.mark.mariadb
                )
                server_id = f"{block.id}[{server}]"
                params.append(
                    pytest.param(block, server, id=server_id, marks=[*marks, server_mark])
                )
    return params


def _check_not_run(block: Block) -> None:
    """A python fragment still has to be Python (top-level await is allowed in a fragment)."""
    if block.lang == "python" and block.not_run == "fragment":
        try:
            compile(block.text, block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError as exc:
            pytest.fail(f"{block.id}: fragment is not Python: {exc}", pytrace=False)


@pytest.mark.parametrize(("block", "backend"), _params())
def test_block(block: Block, backend: str, page_runs: PageRuns) -> None:
    if block.problems:
        pytest.fail(f"{block.id}: " + "; ".join(block.problems), pytrace=False)
    if block.not_run is not None:
        _check_not_run(block)
        return
    if block.unrunnable is not None:
        pytest.fail(block.unrunnable, pytrace=False)
    _check_brokers(block.page)
    failure = None
    try:
        if "alone" in block.options:  # its own folder, nothing before it, a fresh checkout
            alone = page_runs.get(f"{block.page}:{block.line}", backend, page_runs.checkout_copy())
            alone.run_through([block], block)
        else:
            page_runs.get(block.page, backend).run_through(parse(ROOT / block.page), block)
    except BlockFailed as exc:
        failure = str(exc)
    if failure is not None:
        pytest.fail(failure, pytrace=False)
