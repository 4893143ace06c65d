"""Debian's Chromium driven by Playwright: headless, sandbox off (containers), no network
services of its own, and a fresh profile every time. Playwright's own browser download is never
used (these machines have no internet)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import BrowserContext, sync_playwright

CHROMIUM = Path(os.environ.get("CARAVEL_TEST_CHROMIUM", "/usr/bin/chromium"))
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here, or ``None``."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)"
    return None


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[BrowserContext]:
    """A browser context with a fresh ``--user-data-dir`` (Playwright passes it for a
    persistent context) and a ``width`` x ``height`` viewport."""
    with tempfile.TemporaryDirectory(prefix="caravel-chromium-") as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            headless=True,
            args=ARGS,
            viewport={"width": width, "height": height},
            locale="en-GB",
            timezone_id="UTC",
            color_scheme="light",
        )
        try:
            yield context
        finally:
            context.close()
