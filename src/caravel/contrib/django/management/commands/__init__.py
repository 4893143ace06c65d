"""``caravel_worker`` and ``caravel_status``."""
