"""Caravel's own Alembic migration history (version table ``caravel_alembic_version``)."""

#: The newest revision in ``versions/``, named here so a worker's schema check at start-up
#: needs no Alembic; a test holds it to Alembic's own reading of the history.
HEAD = "0022"
