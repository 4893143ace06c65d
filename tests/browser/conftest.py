"""The dashboard's fixtures for the browser tests: the seeded queue (built outside the event
loop the server runs in) and the check that Debian's Chromium is there."""

from tests.support.dashboard.fixtures import need_chromium, seeded_sync

__all__ = ["need_chromium", "seeded_sync"]
