"""The store conformance suite: the store protocol called directly, run unchanged against every
store (see ``conftest.py`` for the list)."""
