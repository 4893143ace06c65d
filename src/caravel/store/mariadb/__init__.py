"""The MariaDB dialect of the store, through asyncmy. Its modules, one concern each:

* ``connections``: the engine, the session every connection starts with, the version check;
* ``execution``: the shared statements run the way MariaDB can (``UPDATE ... RETURNING`` and
  claims that skip locked rows);
* ``upserts``: the INSERT construct with the conflict clauses the shared operations use;
* ``releases``: chains and batches releasing their held jobs, in the transaction of the change;
* ``model``: the tables as MariaDB holds them, for ``caravel db check``;
* ``store``: the store itself.
"""

from caravel.store.mariadb.connections import create_engine
from caravel.store.mariadb.store import MariadbStore

__all__ = ["MariadbStore", "create_engine"]
