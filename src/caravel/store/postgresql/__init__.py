"""The PostgreSQL dialect of the store, through psycopg 3. Its modules, one concern each:

* ``connections``: the engine and its settings, the hot autocommit connections, cutting a
  connection stuck past its deadline;
* ``statements``: SQL compiled once by SQLAlchemy and run straight on psycopg in binary;
* ``notifications``: which enqueues send a NOTIFY (with its cooldown and trailing wake-up), and
  the LISTEN feed;
* ``insert_statements`` and ``inserts``: the insert operation and its strategies;
* ``store``: the store itself, with claims and acknowledgements.
"""

from caravel.store.postgresql.connections import create_engine
from caravel.store.postgresql.store import PostgresStore

__all__ = ["PostgresStore", "create_engine"]
