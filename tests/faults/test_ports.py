"""The private servers' ports: below the kernel's ephemeral range, never handed to two live
test processes at once, and taken back from a process that is gone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults import ports


def _ephemeral_low() -> int:
    text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text(encoding="utf-8")
    return int(text.split()[0])


def _dead_pid() -> int:
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(child.stdout)


def test_reserved_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    taken = [ports.reserve_port() for _ in range(20)]
    try:
        assert len(set(taken)) == 20
        assert all(1024 <= port < _ephemeral_low() for port in taken)
        for port in taken:
            assert (ports.DIRECTORY / str(port)).read_text(encoding="utf-8") == str(os.getpid())
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))  # nothing listens there
    finally:
        for port in taken:
            ports.release_port(port)
    assert not any((ports.DIRECTORY / str(port)).exists() for port in taken)


def test_a_port_reserved_by_a_live_process_is_never_handed_out() -> None:
    mine = ports.reserve_port()
    try:
        with pytest.raises(RuntimeError, match="no free port"):
            ports.reserve_port(attempts=5, candidates=range(mine, mine + 1))
    finally:
        ports.release_port(mine)


def test_a_reservation_whose_owner_is_gone_is_taken_over() -> None:
    port = ports.reserve_port()
    ports.release_port(port)
    (ports.DIRECTORY / str(port)).write_text(str(_dead_pid()), encoding="utf-8")
    try:
        assert ports.reserve_port(attempts=1, candidates=range(port, port + 1)) == port
        assert (ports.DIRECTORY / str(port)).read_text(encoding="utf-8") == str(os.getpid())
    finally:
        ports.release_port(port)
