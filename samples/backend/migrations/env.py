"""Alembic environment for the backend's own tables. Run through ``python -m
caravel_samples.backend migrate`` (or :mod:`caravel_samples.backend.schema`); the queue's tables
have their own history and are never compared or touched here."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context
from caravel_samples.backend.db import metadata
from caravel_samples.backend.schema import include_name, include_object

config = context.config


def run() -> None:
    engine = sa.create_engine(config.attributes["url"], poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=metadata,
                include_name=include_name,
                include_object=include_object,
                compare_type=True,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


run()
