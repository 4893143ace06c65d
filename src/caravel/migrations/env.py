"""Alembic environment for the queue's own migrations.

It runs only through :mod:`caravel.migrate`, which passes the target URL (or an open connection)
in ``config.attributes``. Only Caravel's tables are compared, so an application's own tables in
the same database are never touched, and the history lives in its own version table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from caravel.store.schema import VERSION_TABLE, include_object, metadata

config = context.config


def _run(connection: sa.Connection) -> None:
    if connection.dialect.name == "mariadb":
        # Refused before anything is created, as the queue refuses it (DatabaseVersionError).
        from caravel.store.mariadb.connections import check_version

        # The server's own version, as the handshake gave it: no statement, which would open a
        # transaction before the migration's own.
        check_version(str(connection.connection.dbapi_connection.get_server_info()))  # type: ignore[union-attr]
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        include_object=include_object,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = sa.create_engine(config.attributes["url"], poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():  # pragma: no cover - SQL scripts are rendered with the URL's dialect
    context.configure(
        url=config.attributes["url"],
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
