"""Without Django installed (a venv without the ``django`` extra) the sample's tests are not
collected, except under ``CI=true``, where that is an error."""

from __future__ import annotations

from tests.support.databases import IN_CI

try:
    import django  # noqa: F401
except ImportError:
    if IN_CI:
        raise
    collect_ignore_glob = ["test_*.py"]
