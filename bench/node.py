"""The peers that run under Node.js: graphile-worker, whose adapter (``bench/adapters/graphile``)
installs the packages its ``package-lock.json`` pins with ``npm ci`` on first use, and again
whenever the lock file changes."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

ADAPTERS = Path(__file__).resolve().parent / "adapters"
#: Each Node peer's adapter script, in a folder of its own with its package.json.
SCRIPTS = {"graphile": ADAPTERS / "graphile" / "adapter.mjs"}


class NodeMissing(RuntimeError):
    """Node.js or npm is not on this machine's path."""


def command_for(peer: str) -> list[str]:
    """The argv that runs ``peer``'s adapter: ``node`` itself (not npx or a shell), so that the
    process the harness meters is the one doing the work. Its packages are installed first."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing = "node" if node is None else "npm"
        raise NodeMissing(f"{peer} runs under Node.js: install node and npm ({missing} not found)")
    script = SCRIPTS[peer]
    folder = script.parent
    lock = folder / "package-lock.json"
    stamp = folder / "node_modules" / ".caravel-installed"
    wanted = hashlib.sha256(lock.read_bytes()).hexdigest()
    if not (stamp.exists() and stamp.read_text() == wanted):
        subprocess.run([npm, "ci", "--silent", "--no-audit", "--no-fund"], cwd=folder, check=True)
        stamp.write_text(wanted)
    return [node, str(script)]


def version(peer: str, package: str) -> str | None:
    """The version of ``package`` that ``npm ci`` installed for ``peer``'s adapter; ``None``
    before it has run."""
    manifest = SCRIPTS[peer].parent / "node_modules" / package / "package.json"
    try:
        return str(json.loads(manifest.read_text(encoding="utf-8"))["version"])
    except (OSError, ValueError, KeyError):
        return None
