"""Run a page's blocks in order in one folder, the way a reader follows the page.

A test for one block first runs every earlier runnable block of its page that has not run yet
(in this process), so ``-k`` on a single block works and a block may rely on the files and the
database the blocks before it made."""

from __future__ import annotations

import os
import py_compile
import select
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.docs.blocks import ROOT, SHELL, Block

# The documented placeholder URLs, and what a page run puts in their place.
SQLITE_PLACEHOLDER = "sqlite:///queue.db"
POSTGRES_PLACEHOLDER = "postgresql://app@db/app"
MARIADB_PLACEHOLDER = "mariadb://app@db/app"
BIN = Path(sys.executable).parent


class BlockFailed(AssertionError):
    pass


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class PageRun:
    folder: Path
    backend: str  # "sqlite", "postgresql" or "mariadb"
    database_url: str
    checkout: Path = ROOT  # what CARAVEL_CHECKOUT names
    # What CARAVEL_PACKAGE names (docs/install.md): the wheel `make dist` builds, made when a
    # block first mentions the variable.
    package: Callable[[], Path] | None = None
    done: set[int] = field(default_factory=set)
    failed: dict[int, str] = field(default_factory=dict)
    background: list[tuple[Block, subprocess.Popen[str]]] = field(default_factory=list)
    started: dict[int, str] = field(default_factory=dict)  # a background block's first line

    def env(self, block: Block) -> dict[str, str]:
        env = dict(os.environ)
        # The checkout's caravel and python come first, as after `. .venv/bin/activate`.
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        env["CARAVEL_CHECKOUT"] = str(self.checkout)
        if self.package is not None and "CARAVEL_PACKAGE" in block.text:
            env["CARAVEL_PACKAGE"] = str(self.package())
        # A reader's shell: no queue URL of ours, no settings of a `make` the suite runs under.
        for name in ("CARAVEL_DATABASE_URL", "MAKEFLAGS", "MAKELEVEL", "MFLAGS"):
            env.pop(name, None)
        return env

    def substitute(self, text: str) -> str:
        for placeholder in (POSTGRES_PLACEHOLDER, MARIADB_PLACEHOLDER, SQLITE_PLACEHOLDER):
            text = text.replace(placeholder, self.database_url)
        return text

    def run_through(self, blocks: list[Block], target: Block) -> None:
        for block in blocks:
            if block.line > target.line:
                break
            if (
                not block.runnable
                or block.line in self.done
                or ("alone" in block.options and block is not target)
            ):
                continue
            if block.line in self.failed:
                raise BlockFailed(f"{block.id} failed earlier:\n{self.failed[block.line]}")
            try:
                self._run(block)
            except BlockFailed as exc:
                self.failed[block.line] = str(exc)
                raise
            self.done.add(block.line)
        if not any(b.runnable and b.line > target.line for b in blocks):
            self.stop_background()  # the page's end

    def _run(self, block: Block) -> None:
        text = self.substitute(block.text)
        if block.file_name is not None:
            path = self.folder / block.file_name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            if path.suffix == ".py":
                try:
                    py_compile.compile(str(path), doraise=True)
                except py_compile.PyCompileError as exc:
                    problem = f"{block.id}: {block.file_name} does not compile: {exc}"
                    raise BlockFailed(problem) from exc
            return
        if block.lang == "python":
            script = self.folder / f"_block_{block.line}.py"
            script.write_text(text, encoding="utf-8")
            self._command(block, [sys.executable, script.name])
        elif block.lang in SHELL:
            self._command(block, ["bash", "-euo", "pipefail", "-c", text])
        else:
            raise BlockFailed(f"{block.id}: don't know how to run a {block.lang or 'plain'} block")

    def _command(self, block: Block, argv: list[str]) -> None:
        if "background" in block.options:
            proc = subprocess.Popen(
                argv,
                cwd=self.folder,
                env=self.env(block),
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.background.append((block, proc))
            # Its first line of output says it is up (the worker prints one once Ctrl+C is
            # handled); a command that exits first (a bad option, a missing module) fails here.
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], block.timeout)
            first = proc.stdout.readline() if ready else ""
            if proc.poll() is not None or not ready:
                self.background.pop()
                os.killpg(proc.pid, signal.SIGKILL)
                output = first + proc.communicate()[0]
                raise BlockFailed(f"{block.id} did not start:\n{_tail(output)}")
            self.started[block.line] = first
            return
        try:
            result = subprocess.run(
                argv,
                cwd=self.folder,
                env=self.env(block),
                text=True,
                capture_output=True,
                timeout=block.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            output = (exc.stdout or "") + (exc.stderr or "")
            raise BlockFailed(
                f"{block.id} still running after {block.timeout} s:\n{_tail(str(output))}"
            ) from exc
        finally:
            self.stop_background()
        if result.returncode != 0:
            raise BlockFailed(
                f"{block.id} exited {result.returncode}:\n{_tail(result.stdout + result.stderr)}"
            )

    def stop_background(self) -> None:
        """SIGINT to every background block (a reader's Ctrl+C); each must exit 0."""
        problems = []
        while self.background:
            block, proc = self.background.pop()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
            try:
                output = self.started.get(block.line, "") + proc.communicate(timeout=30)[0]
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                output, _ = proc.communicate()
                problems.append(f"{block.id} did not stop within 30 s of SIGINT:\n{_tail(output)}")
                continue
            if proc.returncode != 0:
                problems.append(f"{block.id} exited {proc.returncode}:\n{_tail(output)}")
        if problems:
            raise BlockFailed("\n".join(problems))
