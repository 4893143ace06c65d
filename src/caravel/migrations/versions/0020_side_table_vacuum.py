"""Tune autovacuum, on PostgreSQL, for the tables that churn with every job besides the jobs
table: attempt records, rate-limit starts and batch counters.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07

A queue table's whole live set turns over constantly: each job adds an attempt record (deleted
with its job when it is pruned), each claim of a rate-limited queue adds a start (deleted once
outside the window), and each acknowledgement of a batch member updates its batch's row. With
PostgreSQL's defaults a table is vacuumed once 20% of its rows are dead, so the dead rows it
carries grow with the history kept, and the cost-based delay makes one vacuum of a large table
slow. ``0002`` gave ``caravel_jobs`` its own settings; these tables get the same: vacuum after 1%
of rows changed (plus the default 50), analyze after 2%, without the cost-based delay (the
tables are narrow, one pass is cheap). The downgrade resets them to the server's settings.
Nothing changes on SQLite (freed pages are reused without a vacuum) or MariaDB (InnoDB's purge
thread removes old row versions on its own).
"""

from __future__ import annotations

from alembic import op

from caravel.migrations.losses import LossKind

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

#: What this downgrade deletes: nothing, only storage parameters change.
LOSSES: tuple[LossKind, ...] = ()

#: The tables, besides caravel_jobs (0002), whose rows come and go with every job.
TABLES = ("caravel_attempts", "caravel_queue_starts", "caravel_batches")
#: The same settings 0002 gives caravel_jobs.
SETTINGS = {
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_vacuum_cost_delay": "0",
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    settings = ", ".join(f"{name} = {value}" for name, value in SETTINGS.items())
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} SET ({settings})")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} RESET ({', '.join(SETTINGS)})")
