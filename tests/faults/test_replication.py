"""The primary-and-standby pair of :mod:`tests.faults.replication` itself: it streams, a
synchronous standby has every commit the primary acknowledged, the kill leaves nothing of the
primary running, and the promoted standby takes writes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import psycopg
import pytest

from tests.faults.ports import DIRECTORY
from tests.faults.replication import ReplicatedPair
from tests.support.databases import IN_CI

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.postgres]


def make_pair(synchronous: bool) -> ReplicatedPair:
    try:
        return ReplicatedPair.create(synchronous=synchronous)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        message = f"cannot make a private primary and standby: {exc}"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@pytest.fixture
def pair() -> Iterator[ReplicatedPair]:
    made = make_pair(synchronous=True)
    try:
        yield made
    finally:
        made.destroy()


def test_a_synchronous_standby_has_every_acknowledged_commit_after_promotion(
    pair: ReplicatedPair,
) -> None:
    assert pair.replication_state() == ("streaming", "sync")
    assert pair.standby.in_recovery()
    url = pair.create_database("kept")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (n int)")
        for n in range(50):
            conn.execute("INSERT INTO t VALUES (%s)", (n,))
    took = pair.fail_over()
    print(f"promotion took {took:.2f}s")
    assert pair.primary.postmaster() is None
    assert not pair.primary.is_up()
    assert not pair.standby.in_recovery()
    standby_url = url.replace(f":{pair.primary.port}/", f":{pair.standby.port}/")
    with psycopg.connect(standby_url, autocommit=True) as conn:
        rows = conn.execute("SELECT count(*), sum(n) FROM t").fetchone()
        conn.execute("INSERT INTO t VALUES (50)")  # the promoted standby takes writes
    assert rows == (50, sum(range(50)))


def test_libpq_follows_a_host_list_to_whichever_accepts_writes(pair: ReplicatedPair) -> None:
    """libpq's own behaviour, which multi-host URLs rely on: with
    ``target_session_attrs=read-write`` it skips a standby, and a host that is down."""
    conninfo = (
        f"host=127.0.0.1,127.0.0.1 port={pair.standby.port},{pair.primary.port} "
        "user=postgres dbname=postgres target_session_attrs=read-write connect_timeout=5"
    )
    with psycopg.connect(conninfo, autocommit=True) as conn:
        assert conn.info.port == pair.primary.port
    pair.fail_over()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        assert conn.info.port == pair.standby.port
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)


def test_destroy_leaves_no_process_folder_or_port_behind() -> None:
    pair = make_pair(synchronous=False)
    assert pair.replication_state() == ("streaming", "async")
    pair.primary.kill()
    clusters = (pair.primary, pair.standby)
    pair.destroy()
    for cluster in clusters:
        assert cluster.postmaster() is None
        assert not cluster.root.exists()
        assert not (DIRECTORY / str(cluster.port)).exists()
