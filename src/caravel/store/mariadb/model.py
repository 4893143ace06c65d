"""The queue's tables as MariaDB holds them (migration 0016), for ``caravel db check``: the shared
model (:data:`caravel.store.schema.metadata`) with MariaDB's types for long texts, the generated
columns that stand in for partial and expression indexes, those columns' indexes, and the
releases table."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from caravel.limits import PRIORITY_AGING_MS
from caravel.store.schema import (
    JOBS_TABLE,
    RELEASES_TABLE,
    TABLE_NAMES,
    WORKFLOW_SIGNALS_TABLE,
    metadata,
)

__all__ = ["LONG_TEXTS", "include_in_model", "mariadb_model"]

#: The jobs table's texts that may hold a payload or a result: ``MEDIUMTEXT`` (``TEXT`` stops at
#: 64 KiB).
LONG_TEXTS = ("payload", "result", "upstream", "progress", "meta")

#: The generated columns of the jobs table: name, type, expression.
_GENERATED: tuple[tuple[str, Any, str], ...] = (
    ("pending_ready", sa.String(128), "if(`state` = 'ready',`pending_key`,NULL)"),
    ("claim_rank", sa.BigInteger(), f"`due_at` - `priority` * {PRIORITY_AGING_MS}"),
    ("partition_key_or_tenant", sa.String(128), "coalesce(`partition_key`,`tenant_id`)"),
)

#: The jobs table's indexes that differ from the shared model's: name, columns, unique.
_INDEXES: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("uq_caravel_jobs_pending", ("queue", "tenant_id", "pending_ready"), True),
    ("ix_caravel_jobs_leases", ("queue", "state", "available_at"), False),
    ("ix_caravel_jobs_ranked", ("queue", "state", "claim_rank", "seq"), False),
    (
        "ix_caravel_jobs_fair",
        ("queue", "state", "partition_key_or_tenant", "claim_rank", "seq"),
        False,
    ),
    ("ix_caravel_jobs_finished", ("queue", "state", "available_at", "finished_at"), False),
    # No partial index: the state leads instead.
    ("ix_caravel_jobs_dead", ("state", "created_at", "id"), False),
)


def mariadb_model() -> sa.MetaData:
    """The queue's tables with MariaDB's columns and indexes."""
    model = sa.MetaData()
    for table in metadata.sorted_tables:
        table.to_metadata(model)
    jobs = model.tables[JOBS_TABLE]
    for name in LONG_TEXTS:
        jobs.c[name].type = mysql.MEDIUMTEXT()
    jobs.append_column(
        sa.Column("seq", mysql.BIGINT(unsigned=True), nullable=False, autoincrement=True)
    )
    for name, type_, expression in _GENERATED:
        jobs.append_column(sa.Column(name, type_, sa.Computed(expression, persisted=False)))
    replaced = {name for name, _, _ in _INDEXES}
    for index in [index for index in jobs.indexes if index.name in replaced]:
        jobs.indexes.discard(index)
    for name, columns, unique in _INDEXES:
        sa.Index(name, *(jobs.c[column] for column in columns), unique=unique)
    sa.Index("uq_caravel_jobs_seq", jobs.c.seq, unique=True)
    model.tables[WORKFLOW_SIGNALS_TABLE].c.payload.type = mysql.MEDIUMTEXT()
    sa.Table(
        RELEASES_TABLE,
        model,
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=True),
        sa.Column("conn", mysql.BIGINT(unsigned=True), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Index("ix_caravel_releases_conn", "conn", "id"),
    )
    return model


def include_in_model(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    """:func:`caravel.store.schema.include_object` with MariaDB's releases table."""
    ours = {*TABLE_NAMES, RELEASES_TABLE}
    if type_ == "table":
        return name in ours
    table = getattr(obj, "table", None)
    return table is None or getattr(table, "name", None) in ours
