"""Alembic environment for ``results.db``. Run through the sample's ``migrate`` command."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context
from caravel_samples.worker.results import metadata

config = context.config


def run() -> None:
    engine = sa.create_engine(config.attributes["url"], poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            context.configure(connection=connection, target_metadata=metadata)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


run()
