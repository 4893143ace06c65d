"""Caravel's benchmark suite: ``python -m bench --help`` (or ``make bench``).

Speed is measured here, written to JSON and to ``docs/performance.md``, and never asserted in a
test.
"""
