"""Applying and checking both of the sample's schemas, deliberately: the sample never creates
its schema at start-up. On SQLite the queue and the results are two files; on PostgreSQL and
MariaDB they share one database, each with its own migrations (the queue's version table is
``caravel_alembic_version``, the results' ``alembic_version``), and the results' history never
compares or touches the queue's tables."""

from __future__ import annotations

from importlib.resources import files

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from caravel_samples.worker.results import metadata
from caravel_samples.worker.settings import Settings

from caravel import CaravelError, migrate

#: Alembic filters: the queue's tables beside the results belong to Caravel's own history.
include_object = migrate.exclude_caravel_tables
include_name = migrate.exclude_caravel_names


def _results_config(settings: Settings) -> Config:
    config = Config()
    config.set_main_option("script_location", str(files("caravel_samples.worker") / "migrations"))
    config.attributes["url"] = settings.results_url(blocking=True)
    return config


def migrate_all(settings: Settings) -> None:
    migrate.upgrade(settings.queue_url)
    command.upgrade(_results_config(settings), "head")


def check_all(settings: Settings) -> list[str]:
    """Problems found (empty when both schemas are at head and match their models)."""
    queue_name, results_name = settings.names
    problems: list[str] = []
    try:
        migrate.check(settings.queue_url)
    except CaravelError as exc:
        problems.append(f"{queue_name}: {exc}")
    if settings.provider == "sqlite" and not settings.results_path.exists():
        return [*problems, "results.db: missing; run `python -m caravel_samples.worker migrate`"]
    head = ScriptDirectory.from_config(_results_config(settings)).get_current_head()
    engine = sa.create_engine(settings.results_url(blocking=True), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"include_name": include_name, "include_object": include_object}
            )
            current = context.get_current_revision()
            diffs = compare_metadata(context, metadata) if current == head else []
    except sa.exc.OperationalError as exc:
        reason = str(exc.orig).splitlines()[0] if exc.orig else type(exc).__name__
        return [*problems, f"{results_name}: cannot be read ({reason})"]
    finally:
        engine.dispose()
    if current != head:
        problems.append(
            f"{results_name}: at revision {current or 'none'}, the newest is {head}; "
            "run `python -m caravel_samples.worker migrate`"
        )
    elif diffs:
        problems.append(f"{results_name}: the table differs from the model: {diffs}")
    return problems
