"""A throwaway PostgreSQL primary with a streaming standby, for the failover tests and for the
benchmark of what replication costs (``bench/replication_cost.py``, which imports this module
without pytest: only :func:`pair_for_test` needs it).

:meth:`ReplicatedPair.create` makes a primary (a :class:`~tests.faults.pgserver.PrivateCluster`
set up to stream its WAL) with a replication role, takes a base backup of it with
``pg_basebackup -R`` into the standby's folder, starts the standby on its own port and waits
until it streams. With ``synchronous=True`` the primary then names the standby in
``synchronous_standby_names`` (``synchronous_commit=on``): a commit returns only once the
standby has flushed it. Otherwise replication is asynchronous, and a commit the primary
acknowledged may not have reached the standby yet.

:meth:`ReplicatedPair.fail_over` SIGKILLs the primary (every process of it, at once) and
promotes the standby. :meth:`ReplicatedPair.url` gives a multi-host URL naming both, with
``target_session_attrs=read-write``, so a client follows whichever of them accepts writes.
:meth:`ReplicatedPair.destroy` stops both and removes their folders and port reservations.
Neither ever touches the machine's shared server.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from sqlalchemy.engine import make_url

from tests.faults.pgserver import SUPERUSER, PrivateCluster

__all__ = ["REPLICATION_USER", "STANDBY_NAME", "ReplicatedPair"]

REPLICATION_USER = "replicator"
#: The standby's ``application_name``, which ``synchronous_standby_names`` refers to.
STANDBY_NAME = "caravel_standby"

#: What a primary needs to feed a streaming standby (PostgreSQL 15's defaults, said aloud), and
#: what the standby needs to answer reads while it follows. ``initdb -A trust`` already lets
#: replication connections in from 127.0.0.1.
PRIMARY_SETTINGS = {
    "wal_level": "replica",
    "max_wal_senders": "5",
    "max_replication_slots": "5",
    "hot_standby": "on",
    "wal_keep_size": "'64MB'",
    "synchronous_commit": "on",
}


class ReplicatedPair:
    """A primary and its streaming standby. After :meth:`fail_over` the standby is the
    primary, and ``primary`` is the dead former one."""

    def __init__(self, primary: PrivateCluster, standby: PrivateCluster, synchronous: bool) -> None:
        self.primary = primary
        self.standby = standby
        self.synchronous = synchronous
        self.failed_over = False
        self.killed_at: float | None = None

    @classmethod
    def create(cls, *, synchronous: bool, settings: dict[str, str] | None = None) -> ReplicatedPair:
        """Both clusters, streaming (and, with ``synchronous``, the standby synchronous), each
        with ``settings`` on top of its own (the benchmark turns ``fsync`` back on).
        Raises ``RuntimeError`` when a cluster cannot be made."""
        primary = PrivateCluster.create(settings={**PRIMARY_SETTINGS, **(settings or {})})
        standby: PrivateCluster | None = None
        try:
            primary.admin_query(f"CREATE ROLE {REPLICATION_USER} WITH REPLICATION LOGIN")
            standby = PrivateCluster.make(lambda new: _base_backup(primary, new), settings=settings)
            pair = cls(primary, standby, synchronous)
            pair.wait_streaming()
            if synchronous:
                pair.make_synchronous()
            return pair
        except BaseException:
            if standby is not None:
                standby.destroy()
            primary.destroy()
            raise

    def destroy(self) -> None:
        for cluster in (self.standby, self.primary):
            with contextlib.suppress(Exception):
                cluster.destroy()

    # ----- replication ----------------------------------------------------------------------

    def replication_state(self) -> tuple[str, str] | None:
        """The standby's ``(state, sync_state)`` as the primary sees it, if it is connected."""
        rows = self.primary.admin_query(
            "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s",
            (STANDBY_NAME,),
        )
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    def wait_streaming(self, timeout: float = 60.0, sync_state: str | None = None) -> None:
        """Wait until the standby streams from the primary (with ``sync_state``, in that
        replication mode)."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.replication_state()
            streaming = state is not None and state[0] == "streaming"
            if streaming and (sync_state is None or (state and state[1]) == sync_state):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the standby is not streaming after {timeout}s ({state}); its log:\n"
                    f"{self.standby.server_log()}"
                )
            time.sleep(0.05)  # a real standby connecting

    def make_synchronous(self) -> None:
        """Name the standby in ``synchronous_standby_names``: from now on a commit on the
        primary returns only once the standby has flushed its WAL."""
        self.primary.admin_query(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
        self.primary.admin_query("ALTER SYSTEM SET synchronous_commit = 'on'")
        self.primary.admin_query("SELECT pg_reload_conf()")
        self.wait_streaming(sync_state="sync")
        self.synchronous = True

    def behind_bytes(self) -> int:
        """How much of the primary's WAL the standby has not received, in bytes (0 when it has
        all of it: the two positions are read one after the other)."""
        (current,) = self.primary.admin_query("SELECT pg_current_wal_lsn()::text")[0]
        rows = self.standby.admin_query(
            "SELECT pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_receive_lsn())", (current,)
        )
        return max(0, int(rows[0][0] or 0))

    def wait_received(self, timeout: float = 30.0) -> None:
        """Wait until the standby has received (and flushed) the primary's WAL up to where it
        was when called: every commit before the call survives a promotion from then on."""
        (current,) = self.primary.admin_query("SELECT pg_current_wal_lsn()::text")[0]
        deadline = time.monotonic() + timeout
        while True:
            rows = self.standby.admin_query(
                "SELECT pg_last_wal_receive_lsn() >= %s::pg_lsn", (current,)
            )
            if rows[0][0]:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby did not receive up to {current} in {timeout}s")
            time.sleep(0.01)  # a real standby catching up

    def stop_receiving(self, timeout: float = 30.0) -> None:
        """The standby stops receiving WAL (its ``primary_conninfo`` emptied, which ends its
        WAL receiver), as a broken or slow link would leave it: from now on it falls behind by
        whatever the primary commits. Only for asynchronous replication (a synchronous primary
        would wait for it)."""
        if self.synchronous:
            raise AssertionError("a synchronous primary would wait for the standby for ever")
        self.standby.admin_query("ALTER SYSTEM SET primary_conninfo = ''")
        self.standby.admin_query("SELECT pg_reload_conf()")
        deadline = time.monotonic() + timeout
        while self.replication_state() is not None:
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby still streams after {timeout}s")
            time.sleep(0.02)  # a real WAL receiver shutting down

    # ----- failing over ---------------------------------------------------------------------

    def fail_over(self) -> float:
        """SIGKILL the primary and promote the standby; returns the seconds the promotion took.
        ``killed_at`` is when every process of the primary was gone (``time.time()``)."""
        self.primary.kill()
        self.killed_at = time.time()
        took = self.standby.promote()
        self.failed_over = True
        return took

    @property
    def current(self) -> PrivateCluster:
        """The cluster that accepts writes now."""
        return self.standby if self.failed_over else self.primary

    # ----- addresses ------------------------------------------------------------------------

    def url(self, database: str = "postgres", *, spelling: str = "hosts") -> str:
        """A URL naming both clusters, primary first, that connects to whichever accepts
        writes. ``spelling`` ``hosts``: libpq's host list in the authority
        (``postgresql://u@h1:p1,h2:p2/db``); ``query``: SQLAlchemy's ``host=`` parameters
        (``postgresql+psycopg://u@/db?host=h1:p1&host=h2:p2``)."""
        a, b = self.primary.port, self.standby.port
        if spelling == "hosts":
            return (
                f"postgresql://{SUPERUSER}@127.0.0.1:{a},127.0.0.1:{b}/{database}"
                "?target_session_attrs=read-write"
            )
        if spelling == "query":
            return (
                f"postgresql+psycopg://{SUPERUSER}@/{database}?host=127.0.0.1:{a}"
                f"&host=127.0.0.1:{b}&target_session_attrs=read-write"
            )
        raise ValueError(spelling)

    def create_database(self, name: str) -> str:
        """A new database on the primary (and so on the standby); returns its URL on the
        primary alone. Never dropped: it goes with the clusters."""
        self.primary.admin_query(f'CREATE DATABASE "{name}"')
        return self.database_url(self.primary, name)

    @staticmethod
    def database_url(cluster: PrivateCluster, name: str) -> str:
        """The URL of database ``name`` on ``cluster`` alone."""
        return make_url(cluster.admin_url).set(database=name).render_as_string(False)


def _base_backup(primary: PrivateCluster, standby: PrivateCluster) -> None:
    """Fill ``standby``'s data folder with a base backup of ``primary``, set up to follow it
    (``-R``: ``standby.signal`` and ``primary_conninfo``). The settings the primary's own
    ``postgresql.auto.conf`` carried over (its port, its socket folder) are replaced by the
    standby's when it starts; the connection to the primary is kept."""
    conninfo = (
        f"host=127.0.0.1 port={primary.port} user={REPLICATION_USER} "
        f"application_name={STANDBY_NAME}"
    )
    done = standby.run(
        "pg_basebackup",
        "-d",
        conninfo,
        "-D",
        str(standby.data),
        "-R",
        "-X",
        "stream",
        "--checkpoint=fast",
        "--no-sync",
    )
    if done.returncode != 0:
        raise RuntimeError(f"pg_basebackup failed: {done.stderr or done.stdout}")
    auto = (standby.data / "postgresql.auto.conf").read_text(encoding="utf-8")
    for line in auto.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "primary_conninfo":
            standby.settings["primary_conninfo"] = value.strip()
    if "primary_conninfo" not in standby.settings:
        raise RuntimeError(f"pg_basebackup -R wrote no primary_conninfo:\n{auto}")
    standby.settings.update({"hot_standby": "on", "wal_level": "replica"})


@contextlib.contextmanager
def pair_for_test(*, synchronous: bool) -> Iterator[ReplicatedPair]:
    """A pair for one test, destroyed after it; the test is skipped when none can be made,
    or fails under ``CI=true``."""
    import subprocess

    import pytest

    from tests.support.databases import IN_CI

    try:
        made = ReplicatedPair.create(synchronous=synchronous)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        message = f"cannot make a private primary and standby: {exc}"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    try:
        yield made
    finally:
        made.destroy()
