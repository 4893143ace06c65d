"""The fault-injection suite: real worker processes, real signals and real databases, judged by
one checker (``tests/faults/harness.py``). See docs/reliability.md."""
