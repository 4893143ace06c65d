"""Applying the schema deliberately: the queue's migrations (Caravel's own history, version
table ``caravel_alembic_version``) and the backend's (``migrations/``, version table
``alembic_version``), both in the one database. The application never does this at start-up.
"""

from __future__ import annotations

from importlib.resources import files

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from caravel_samples.backend.db import metadata, sqlite_path, sync_url
from caravel_samples.backend.settings import Settings

from caravel import migrate

#: Alembic filter: the queue's tables in the same database belong to Caravel's own history, so
#: this one never compares or touches them.
include_object = migrate.exclude_caravel_tables
include_name = migrate.exclude_caravel_names


def _config(settings: Settings | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(files("caravel_samples.backend") / "migrations"))
    if settings is not None:
        config.attributes["url"] = sync_url(settings)
    return config


def head() -> str:
    """The newest revision of the backend's own history."""
    revision = ScriptDirectory.from_config(_config()).get_current_head()
    assert revision is not None
    return revision


def migrate_all(settings: Settings) -> None:
    """Bring the queue and the backend's tables to their newest revisions."""
    migrate.upgrade(settings.database_url)
    upgrade_app(settings, "head")


def upgrade_app(settings: Settings, revision: str = "head") -> None:
    """Apply the backend's own migrations up to ``revision``."""
    command.upgrade(_config(settings), revision)


def downgrade_app(settings: Settings, revision: str) -> None:
    """Revert the backend's own migrations down to ``revision`` (the queue is untouched)."""
    command.downgrade(_config(settings), revision)


def _inspect(settings: Settings) -> sa.Engine | None:
    """A synchronous engine that changes nothing (``None`` when the SQLite file is missing)."""
    url = sync_url(settings)
    if settings.database_provider == "sqlite":
        path = sqlite_path(settings)
        if not path.exists():
            return None
        url = url.set(database=f"file:{path}", query={"mode": "ro", "uri": "true"})
    return sa.create_engine(url, poolclass=sa.pool.NullPool)


def current_app(settings: Settings) -> str | None:
    """The applied revision of the backend's history, or ``None``."""
    engine = _inspect(settings)
    if engine is None:
        return None
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def check_all(settings: Settings) -> list[str]:
    """Problems found: empty when the queue and the backend's tables are at their newest
    revisions and the backend's tables match :mod:`caravel_samples.backend.db`."""
    problems: list[str] = []
    try:
        migrate.check(settings.database_url)
    except Exception as exc:  # SchemaNotReadyError or StoreError, with the reason
        problems.append(f"queue: {exc}")
    engine = _inspect(settings)
    if engine is None:
        return [*problems, "backend: the database file does not exist"]
    newest = head()
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn,
                opts={
                    "include_name": include_name,
                    "include_object": include_object,
                    "compare_type": True,
                },
            )
            found = context.get_current_revision()
            diffs = compare_metadata(context, metadata) if found == newest else []
    finally:
        engine.dispose()
    if found != newest:
        problems.append(f"backend: at revision {found or 'none'}, the newest is {newest}")
    elif diffs:
        problems.append(f"backend: the tables differ from the model: {diffs}")
    return problems
