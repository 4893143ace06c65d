"""The Django sample (samples/django), by its own tests and as real processes."""
