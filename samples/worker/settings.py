"""The sample's settings, read once from the environment.

``CARAVEL_WORKER_DIRECTORY`` (required) is the folder holding ``queue.db`` and ``results.db``.
The others exist only for the smoke test: ``CARAVEL_WORKER_CRASH_AFTER_RESULT=1`` makes the
process exit with code 73 right after it saves a result and before it acknowledges the job,
``CARAVEL_WORKER_LEASE_SECONDS`` shortens the lease (60 seconds by default), and
``CARAVEL_WORKER_HANDLER_DELAY_MS`` makes each job pause before saving its result, so a signal
can arrive mid-job (0 by default).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from caravel import OptionsError

CRASH_EXIT_CODE = 73


@dataclass(frozen=True)
class Settings:
    directory: Path
    lease_seconds: int
    crash_after_result: bool
    handler_delay_ms: int = 0

    @property
    def queue_url(self) -> str:
        return f"sqlite:///{self.directory / 'queue.db'}"

    @property
    def results_path(self) -> Path:
        return self.directory / "results.db"

    @classmethod
    def from_environment(cls) -> Settings:
        folder = os.environ.get("CARAVEL_WORKER_DIRECTORY", "").strip()
        if not folder:
            raise OptionsError("CARAVEL_WORKER_DIRECTORY", "must name an existing folder")
        directory = Path(folder)
        if not directory.is_dir():
            raise OptionsError("CARAVEL_WORKER_DIRECTORY", "must name an existing folder")
        raw = os.environ.get("CARAVEL_WORKER_LEASE_SECONDS", "60")
        try:
            lease = int(raw)
        except ValueError:
            raise OptionsError("CARAVEL_WORKER_LEASE_SECONDS", "must be whole seconds") from None
        if not (1 <= lease <= 3600):
            raise OptionsError("CARAVEL_WORKER_LEASE_SECONDS", "must be from 1 to 3600")
        crash = os.environ.get("CARAVEL_WORKER_CRASH_AFTER_RESULT", "") == "1"
        try:
            delay = int(os.environ.get("CARAVEL_WORKER_HANDLER_DELAY_MS", "0"))
        except ValueError:
            raise OptionsError("CARAVEL_WORKER_HANDLER_DELAY_MS", "must be milliseconds") from None
        if not (0 <= delay <= 600_000):
            raise OptionsError("CARAVEL_WORKER_HANDLER_DELAY_MS", "must be from 0 to 600000")
        return cls(
            directory=directory,
            lease_seconds=lease,
            crash_after_result=crash,
            handler_delay_ms=delay,
        )
