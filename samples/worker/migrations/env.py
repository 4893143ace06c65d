"""Alembic environment for the results table. Run through the sample's ``migrate`` command. On
PostgreSQL and MariaDB the queue's tables share the database; they have their own history and
are never compared or touched here."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context
from caravel_samples.worker.results import metadata
from caravel_samples.worker.schema import include_name, include_object

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
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


run()
