"""An application's own Alembic history beside the queue: its autogenerate writes an outbox
migration that runs as generated, and, over a database the queue shares, proposes nothing of
Caravel's when its env.py uses ``caravel.migrate.exclude_caravel_tables``. Both databases, a real
scratch project (``alembic init``, autogenerate, upgrade)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from caravel import migrate
from caravel.store.urls import sync_url

ENV = """
import sqlalchemy as sa
from alembic import context
import caravel.migrate
from app_models import metadata

config = context.config
engine = sa.create_engine(config.get_main_option("sqlalchemy.url"), poolclass=sa.pool.NullPool)
with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        {include}
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
"""

MODELS = """
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from caravel import add_outbox


class Base(DeclarativeBase):
    pass


class Report(Base):
    __tablename__ = "reports"
    id: Mapped[int] = mapped_column(primary_key=True)
    title: Mapped[str] = mapped_column(sa.String(200))


OutboxEnvelope = add_outbox(Base.metadata)
metadata = Base.metadata
"""


def _project(tmp_path: Path, url: str, *, filtered: bool) -> Config:
    """A scratch application: ``alembic init``, its models with the outbox, an env.py."""
    folder = tmp_path / "migrations"
    config = Config(str(tmp_path / "alembic.ini"))
    command.init(config, str(folder))
    config.set_main_option("script_location", str(folder))
    config.set_main_option("sqlalchemy.url", sync_url(url).render_as_string(hide_password=False))
    include = (
        "include_name=caravel.migrate.exclude_caravel_names,"
        " include_object=caravel.migrate.exclude_caravel_tables,"
        if filtered
        else ""
    )
    (folder / "env.py").write_text(ENV.replace("{include}", include), encoding="utf-8")
    (tmp_path / "app_models.py").write_text(MODELS, encoding="utf-8")
    return config


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    sys.modules.pop("app_models", None)


def _generated(tmp_path: Path) -> str:
    (script,) = (tmp_path / "migrations" / "versions").glob("*.py")
    return script.read_text(encoding="utf-8")


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(sync_url(url), poolclass=sa.pool.NullPool)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_the_outbox_migration_runs_as_generated(empty_url: str, scratch: Path) -> None:
    config = _project(scratch, empty_url, filtered=True)
    command.revision(config, message="add the outbox", autogenerate=True)
    assert "<class" not in _generated(scratch)
    command.upgrade(config, "head")
    assert {"reports", "caravel_outbox"} <= _tables(empty_url)


def test_autogenerate_over_a_shared_database_proposes_nothing_of_caravels(
    empty_url: str, scratch: Path
) -> None:
    migrate.upgrade(empty_url)  # the queue's tables, in the application's database
    config = _project(scratch, empty_url, filtered=True)
    command.revision(config, message="the application's tables", autogenerate=True)
    script = _generated(scratch)
    for name in ("caravel_jobs", "caravel_workers", "caravel_alembic_version"):
        assert name not in script
    assert "caravel_outbox" in script  # the application's own outbox table is its to create
    command.upgrade(config, "head")
    assert {"reports", "caravel_outbox", "caravel_jobs"} <= _tables(empty_url)
    migrate.check(empty_url)  # the queue's schema is untouched


def test_without_the_filter_autogenerate_would_drop_the_queue(
    empty_url: str, scratch: Path
) -> None:
    """Why the filter exists: the application's history does not know the queue's tables."""
    migrate.upgrade(empty_url)
    config = _project(scratch, empty_url, filtered=False)
    command.revision(config, message="unfiltered", autogenerate=True)
    assert "drop_table('caravel_jobs')" in _generated(scratch)
