"""The dashboard's fixtures for the browser tests: the seeded queue (built outside the event
loop the server runs in), the check that Debian's Chromium is there, and a fresh browser."""

from collections.abc import Iterator

import pytest
from playwright.sync_api import BrowserContext

from tests.support.dashboard.browser import chromium
from tests.support.dashboard.fixtures import need_chromium, seeded_sync

__all__ = ["browser", "need_chromium", "seeded_sync"]


@pytest.fixture
def browser() -> Iterator[BrowserContext]:
    """Debian's Chromium with a fresh profile, 1280 x 900."""
    with chromium() as context:
        yield context
