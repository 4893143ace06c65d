"""KeptConnections: the blocking connections callers' threads use (the sync facade's one-job
enqueue): how many are kept, how many may be open, and what a broken one takes with it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from caravel.store.blocking import KeptConnections


@dataclass
class Conn:
    n: int
    usable: bool = True
    broken: bool = False
    closed: bool = False


class Opener:
    def __init__(self) -> None:
        self.made: list[Conn] = []

    def __call__(self) -> Conn:
        self.made.append(Conn(len(self.made)))
        return self.made[-1]


def kept(opener: Opener, *, keep: int = 2, limit: int = 3) -> KeptConnections[Conn]:
    return KeptConnections(
        opener,
        lambda conn: setattr(conn, "closed", True),
        keep=keep,
        limit=limit,
        usable=lambda conn: conn.usable,
        broken=lambda conn: conn.broken,
    )


def test_a_connection_given_back_is_the_next_one_taken() -> None:
    opener = Opener()
    pool = kept(opener)
    first = pool.take()
    assert first is not None
    pool.put(first)
    assert pool.take() is first
    assert len(opener.made) == 1


def test_a_burst_opens_up_to_the_limit_and_keeps_only_keep() -> None:
    opener = Opener()
    pool = kept(opener, keep=2, limit=3)
    taken = [pool.take() for _ in range(3)]
    assert pool.take() is None  # the limit: the caller goes another way
    for conn in taken:
        assert conn is not None
        pool.put(conn)
    assert [conn.closed for conn in opener.made] == [False, False, True]
    # The kept ones first; the one closed made room for one more to be opened.
    again = [pool.take() for _ in range(4)]
    assert again == [opener.made[1], opener.made[0], opener.made[3], None]


def test_an_unusable_connection_is_closed_and_a_broken_one_takes_the_idle_ones() -> None:
    opener = Opener()
    pool = kept(opener, keep=3, limit=5)
    a, b, c = (pool.take() for _ in range(3))
    assert a is not None
    assert b is not None
    assert c is not None
    pool.put(a)
    c.usable = False
    pool.put(c)  # mid-transaction, say: closed, the idle one kept
    assert (a.closed, c.closed) == (False, True)
    b.usable, b.broken = False, True
    pool.put(b)  # the server went away: the idle ones went with it
    assert (a.closed, b.closed) == (True, True)
    assert pool.take() is opener.made[3]


def test_a_failed_open_gives_its_place_back() -> None:
    pool: KeptConnections[Conn] = KeptConnections(
        lambda: (_ for _ in ()).throw(OSError("refused")),
        lambda conn: None,
        keep=1,
        limit=1,
        usable=lambda conn: True,
        broken=lambda conn: False,
    )
    for _ in range(2):
        with pytest.raises(OSError, match="refused"):
            pool.take()


def test_closing_closes_the_idle_ones_and_those_in_use_when_given_back() -> None:
    opener = Opener()
    pool = kept(opener)
    idle, busy = pool.take(), pool.take()
    assert idle is not None
    assert busy is not None
    pool.put(idle)
    pool.close()
    assert (idle.closed, busy.closed) == (True, False)
    pool.put(busy)
    assert busy.closed
