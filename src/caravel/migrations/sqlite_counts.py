"""SQLite's finished-job counts (``caravel_finished_counts``, migration 0005): the triggers on
the jobs table that keep them. A migration that recreates the jobs table on SQLite (to change a
constraint) loses its triggers with it, and creates them again from here."""

from __future__ import annotations

__all__ = ["COUNTS_TABLE", "CREATE_TRIGGERS", "TRIGGERS"]

COUNTS_TABLE = "caravel_finished_counts"
TRIGGERS = (
    "caravel_jobs_finished_insert",
    "caravel_jobs_finished_update",
    "caravel_jobs_finished_delete",
)
_ADD = (
    f"INSERT INTO {COUNTS_TABLE} (queue, state, jobs) SELECT NEW.queue, NEW.state, 1"
    " WHERE NEW.available_at IS NULL"
    " ON CONFLICT (queue, state) DO UPDATE SET jobs = jobs + 1;"
)
_TAKE = (
    f"UPDATE {COUNTS_TABLE} SET jobs = jobs - 1"
    " WHERE OLD.available_at IS NULL AND queue = OLD.queue AND state = OLD.state;"
)
CREATE_TRIGGERS = (
    f"CREATE TRIGGER {TRIGGERS[0]} AFTER INSERT ON caravel_jobs"
    f" WHEN NEW.available_at IS NULL BEGIN {_ADD} END",
    f"CREATE TRIGGER {TRIGGERS[1]} AFTER UPDATE OF queue, state, available_at ON caravel_jobs"
    " WHEN OLD.available_at IS NULL OR NEW.available_at IS NULL"
    f" BEGIN {_TAKE} {_ADD} END",
    f"CREATE TRIGGER {TRIGGERS[2]} AFTER DELETE ON caravel_jobs"
    f" WHEN OLD.available_at IS NULL BEGIN {_TAKE} END",
)
