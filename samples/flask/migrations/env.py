"""Alembic environment for the sample's own table. Run through ``python -m
caravel_samples.flask migrate``; the queue's tables in the same database have Caravel's own
history and are never compared or touched here."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context
from caravel_samples.flask.models import metadata

from caravel import migrate

config = context.config


def run() -> None:
    engine = sa.create_engine(config.attributes["url"], poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=metadata,
                include_name=migrate.exclude_caravel_names,
                include_object=migrate.exclude_caravel_tables,
                compare_type=True,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


run()
