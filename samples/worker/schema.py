"""Applying and checking both of the sample's databases, deliberately: the sample never
creates its schema at start-up."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from caravel_samples.worker.results import metadata, results_url
from caravel_samples.worker.settings import Settings

from caravel import CaravelError, migrate


def _results_config(path: Path) -> Config:
    config = Config()
    config.set_main_option("script_location", str(files("caravel_samples.worker") / "migrations"))
    config.attributes["url"] = results_url(path, driver="pysqlite")
    return config


def migrate_all(settings: Settings) -> None:
    migrate.upgrade(settings.queue_url)
    command.upgrade(_results_config(settings.results_path), "head")


def check_all(settings: Settings) -> list[str]:
    """Problems found (empty when both databases are at head and match their models)."""
    problems: list[str] = []
    try:
        migrate.check(settings.queue_url)
    except CaravelError as exc:
        problems.append(f"queue.db: {exc}")
    path = settings.results_path
    if not path.exists():
        return [*problems, "results.db: missing; run `python -m caravel_samples.worker migrate`"]
    head = ScriptDirectory.from_config(_results_config(path)).get_current_head()
    engine = sa.create_engine(results_url(path, driver="pysqlite"), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn)
            current = context.get_current_revision()
            diffs = compare_metadata(context, metadata) if current == head else []
    finally:
        engine.dispose()
    if current != head:
        problems.append(
            f"results.db: at revision {current or 'none'}, the newest is {head}; "
            "run `python -m caravel_samples.worker migrate`"
        )
    elif diffs:
        problems.append(f"results.db: the table differs from the model: {diffs}")
    return problems
