"""The INSERT construct the shared operations ask a dialect for (``on_conflict_do_nothing``,
``on_conflict_do_update`` and ``excluded``), in MariaDB's terms.

``on_conflict_do_nothing`` is ``INSERT IGNORE``, which returns only the rows it inserted. (It
also turns a value that does not fit into a warning; every value is validated before it gets
here, and CHECK constraints still refuse.) ``on_conflict_do_update`` with a ``WHERE`` cannot be
``ON DUPLICATE KEY UPDATE``, which returns the row whether it changed it or not, and updates on
a conflict with any unique index: it becomes an :class:`Upsert`. The row the conflict target
names is read first, locked for update; if there is one, it is updated when the ``WHERE`` holds
for it, else the row is inserted with ``INSERT IGNORE`` (and read again, locked, when another
transaction inserted it meanwhile). Each returns what the statement returns, only for a row it
inserted or changed. Locking the row for update before anything else means two upserts of one
row queue for it; an insert that met the row first would hold a shared lock on it and then ask
for the exclusive one, which two of them at once cannot both get (a deadlock).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from caravel.store.inserts.pending import PENDING_TARGET, PendingUnder

__all__ = ["KEYS", "PROPOSED", "MariaInsert", "Upsert"]

#: The prefix of the names a proposed value passed as a parameter is bound under (see
#: :meth:`MariaInsert.proposed`); :class:`Upsert` binds each parameter under it as well.
PROPOSED = "mariadb_new_"


@dataclass(frozen=True)
class Upsert:
    """``probe`` (the keys of the row the conflict target names, locked, each with ``ok``:
    whether the ``WHERE`` holds for it), ``update`` (the change, applied by key) and ``read``
    (the returned columns, by key); and ``insert`` (ignoring conflicts, returning the rows it
    inserted) when there is no such row."""

    probe: sa.Select[Any]
    update: sa.Update
    read: sa.Select[Any]
    insert: sa.Insert


#: The bound list of keys an :class:`Upsert`'s update and read take.
KEYS = "mariadb_upsert_keys"


class _Excluded:
    """``insert.excluded.<column>``: the value the insert proposed for the column."""

    def __init__(self, owner: MariaInsert) -> None:
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        return self._owner.proposed(name)


class _Conflicting:
    """What ``on_conflict_do_update`` returns: finished by ``returning``."""

    def __init__(
        self, owner: MariaInsert, target: sa.ColumnElement[bool], where: Any, set_: Any
    ) -> None:
        self._owner = owner
        self._target = target
        self._where = where
        self._set = set_

    def returning(self, *columns: Any) -> Upsert:
        table = self._owner.table
        keys = list(table.primary_key.columns)
        ok: Any = (
            sa.literal_column("1") if self._where is None else sa.case((self._where, 1), else_=0)
        )
        probe = sa.select(*keys, ok.label("ok")).where(self._target).with_for_update()
        bound: sa.BindParameter[Any] = sa.bindparam(KEYS, expanding=True)
        by_key = keys[0].in_(bound) if len(keys) == 1 else sa.tuple_(*keys).in_(bound)
        update = sa.update(table).where(by_key).values(self._set)
        read = sa.select(*columns).where(by_key)
        insert = self._owner.insert().prefix_with("IGNORE").returning(*columns)
        return Upsert(probe, update, read, insert)


class MariaInsert:
    """``insert(table)`` with the conflict clauses the shared operations use."""

    def __init__(self, table: sa.Table, values: Mapping[str, Any] | None = None) -> None:
        self.table = table
        self._values = dict(values or {})

    def values(self, **values: Any) -> MariaInsert:
        return MariaInsert(self.table, {**self._values, **values})

    def insert(self) -> sa.Insert:
        statement = sa.insert(self.table)
        return statement.values(self._values) if self._values else statement

    @property
    def excluded(self) -> _Excluded:
        return _Excluded(self)

    def proposed(self, name: str) -> Any:
        """The value this insert proposes for column ``name``: as given to :meth:`values`, or
        bound by the column's name (rows passed as parameters)."""
        if name in self._values:
            value = self._values[name]
            return value if isinstance(value, sa.ClauseElement) else sa.literal(value)
        # Bound under a name of its own: an UPDATE may not bind a name of its table's columns.
        return sa.bindparam(f"{PROPOSED}{name}", type_=self.table.c[name].type)

    def on_conflict_do_nothing(
        self, index_elements: Sequence[Any] | None = None, index_where: Any = None
    ) -> sa.Insert:
        return self.insert().prefix_with("IGNORE")

    def on_conflict_do_update(
        self,
        index_elements: Sequence[Any],
        index_where: Any = None,
        set_: Mapping[str, Any] | None = None,
        where: Any = None,
    ) -> _Conflicting:
        columns = [self.table.c[c] if isinstance(c, str) else c for c in index_elements]
        if index_where is None:
            target = [column == self.proposed(column.name) for column in columns]
            return _Conflicting(self, sa.and_(*target), where, dict(set_ or {}))
        # The one partial unique index, the pending job per key, is a generated column's here:
        # the target is written as that column's value, so the probe reads one entry of
        # uq_caravel_jobs_pending (written as the predicate, it would scan the whole table).
        if [column.name for column in columns] != list(PENDING_TARGET):
            raise ValueError(f"no partial unique index on {index_elements!r} on MariaDB")
        queue, tenant, key = columns
        pending = [
            queue == self.proposed(queue.name),
            tenant == self.proposed(tenant.name),
            PendingUnder(self.table, self.proposed(key.name)),
        ]
        return _Conflicting(self, sa.and_(*pending), where, dict(set_ or {}))
