"""A second network host on this machine: a network namespace joined to the host by a veth pair
on a private /30, so a worker can run "elsewhere" and its link can be cut for real.

Cutting the link (:meth:`NetworkHost.cut`, ``ip link set <host end> down``) makes the kernel
drop every packet between the two ends without telling either side: nothing is reset, segments
are simply never acknowledged. That is the failure TCP keepalives and ``tcp_user_timeout`` exist
for (unlike :class:`tests.faults.proxy.FaultProxy`'s blackhole, where the proxy's kernel still
acknowledges everything). :meth:`NetworkHost.delete_link` removes the pair altogether.

PostgreSQL (and MariaDB) usually listens on localhost only, so the host side runs a
:class:`~tests.faults.proxy.FaultProxy` bound to :attr:`NetworkHost.host_address`, forwarding to
the server the queue URL names (:meth:`FaultProxy.to`; in ``test_server_faults.py`` the private
cluster; MariaDB the same way). Nothing here touches a database server: only the namespace and
its veth pair.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.support.databases import IN_CI

__all__ = ["NetworkHost", "network_host", "require_namespaces"]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip() or done.stdout}")
    return done


def namespaces_unavailable() -> str | None:
    """Why network namespaces cannot be created here (``None`` when they can)."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"cvprobe{os.getpid()}"
    done = _ip("netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"ip netns add failed: {done.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def require_namespaces() -> None:
    """Skip when namespaces cannot be created; in CI (root) fail instead, since it must run."""
    reason = namespaces_unavailable()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"network namespaces unavailable in CI: {reason}", pytrace=False)
        pytest.skip(f"network namespaces unavailable: {reason}")


class NetworkHost:
    """A namespace ``name`` with ``lo`` up and one veth link to the host:
    ``host_address``/30 on the host end, ``address``/30 inside."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.name = f"caravel-{tag}"
        self.host_end = f"cvh{tag}"  # interface names are at most 15 characters
        self.inner_end = f"cvn{tag}"
        # A /30 in 10.200.0.0/16-10.249.0.0/16 chosen at random: two ends, no neighbours.
        a, b, c = secrets.randbelow(50) + 200, secrets.randbelow(256), secrets.randbelow(64) * 4
        self.host_address = f"10.{a}.{b}.{c + 1}"
        self.address = f"10.{a}.{b}.{c + 2}"
        self.created = False
        self.linked = False

    def create(self) -> NetworkHost:
        _ip("netns", "add", self.name)
        self.created = True
        _ip("link", "add", self.host_end, "type", "veth", "peer", "name", self.inner_end)
        self.linked = True
        _ip("link", "set", self.inner_end, "netns", self.name)
        _ip("addr", "add", f"{self.host_address}/30", "dev", self.host_end)
        _ip("link", "set", self.host_end, "up")
        self.inside("ip", "addr", "add", f"{self.address}/30", "dev", self.inner_end)
        self.inside("ip", "link", "set", self.inner_end, "up")
        self.inside("ip", "link", "set", "lo", "up")
        return self

    def command(self, *args: str) -> list[str]:
        """``args`` as a command that runs inside the namespace (``ip netns exec`` execs it, so
        the process id is the program's own)."""
        return ["ip", "netns", "exec", self.name, *args]

    def inside(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.command(*args), capture_output=True, text=True, timeout=30, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} in {self.name} failed: {done.stderr.strip()}")
        return done

    def cut(self) -> None:
        """Take the host end down: packets both ways are dropped, silently."""
        _ip("link", "set", self.host_end, "down")

    def restore(self) -> None:
        """Bring the host end back up (its address and route come back with it)."""
        _ip("link", "set", self.host_end, "up")

    def delete_link(self) -> None:
        """Delete the veth pair (both ends vanish)."""
        if self.linked:
            _ip("link", "del", self.host_end, check=False)
            self.linked = False

    def destroy(self) -> None:
        """Remove the link and the namespace. Processes still inside keep it alive until they
        exit, so stop the ones you started first."""
        self.delete_link()
        if self.created:
            _ip("netns", "del", self.name, check=False)
            self.created = False


@contextlib.contextmanager
def network_host() -> Iterator[NetworkHost]:
    host = NetworkHost()
    try:
        yield host.create()
    finally:
        host.destroy()
