"""Applying and checking the schema, deliberately: the queue's migrations (Caravel's history,
version table ``caravel_alembic_version``) and the sample's own (``migrations/``, version table
``alembic_version``), in the one database. The application never does this at start-up."""

from __future__ import annotations

from importlib.resources import files

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from caravel_samples.flask.models import metadata
from caravel_samples.flask.settings import Settings

from caravel import CaravelError, migrate

_MIGRATE = "run `python -m caravel_samples.flask migrate`"


def _config(settings: Settings) -> Config:
    config = Config()
    config.set_main_option("script_location", str(files("caravel_samples.flask") / "migrations"))
    config.attributes["url"] = settings.app_url
    return config


def migrate_all(settings: Settings) -> None:
    """Bring the queue's tables, then the sample's, to their newest revisions (the queue's
    migration creates a missing SQLite file and puts it in WAL mode; the sample's never
    creates one)."""
    migrate.upgrade(settings.database_url)
    command.upgrade(_config(settings), "head")


def check_all(settings: Settings) -> list[str]:
    """Problems found: empty when both histories are at their newest revisions and the
    ``signups`` table matches :mod:`caravel_samples.flask.models`."""
    try:
        migrate.check(settings.database_url)
    except CaravelError as exc:
        return [f"queue: {exc}"]
    newest = ScriptDirectory.from_config(_config(settings)).get_current_head()
    engine = sa.create_engine(settings.app_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn,
                opts={
                    "include_name": migrate.exclude_caravel_names,
                    "include_object": migrate.exclude_caravel_tables,
                    "compare_type": True,
                },
            )
            found = context.get_current_revision()
            diffs = compare_metadata(context, metadata) if found == newest else []
    finally:
        engine.dispose()
    if found != newest:
        return [f"signups: at revision {found or 'none'}, the newest is {newest}; {_MIGRATE}"]
    if diffs:
        return [f"signups: the table differs from the model: {diffs}"]
    return []
