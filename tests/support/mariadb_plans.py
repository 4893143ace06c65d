"""MariaDB's plans as tests read them: ``ANALYZE FORMAT=JSON`` runs a statement and reports, per
table access, the index it used (``key``), how (``access_type``: ``ALL`` is a scan of the whole
table) and the rows it read (``r_rows``, per loop), and whether it sorted."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.dialects.mysql import mariadb

from tests.support.databases import mariadb_connect

__all__ = ["DIALECT", "compiled", "plan", "sorts", "tables"]

#: The dialect the store's statements are written for, binding as PyMySQL does (``%(name)s``).
DIALECT = mariadb.loader("pymysql")(paramstyle="pyformat")


def compiled(statement: Any, values: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``statement`` as MariaDB's SQL, its lists written out, and the values it binds."""
    sql = statement.compile(dialect=DIALECT, compile_kwargs={"render_postcompile": True})
    return str(sql), {**sql.params, **values}


def plan(
    url: str, text: str, values: dict[str, Any], *, after: tuple[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """MariaDB's ``ANALYZE FORMAT=JSON`` of ``text`` (run ``after`` another statement, given
    the first column of that one's rows as ``picked``). ANALYZE runs the statement, locks and
    all; the transaction is rolled back."""
    with mariadb_connect(url) as conn, conn.cursor() as cursor:
        cursor.execute("START TRANSACTION")
        if after is not None:
            cursor.execute(*after)
            values = {**values, "picked": [row[0] for row in cursor.fetchall()]}
        cursor.execute("ANALYZE FORMAT=JSON " + text, values)
        row = cursor.fetchone()
        cursor.execute("ROLLBACK")
    assert row is not None
    found: dict[str, Any] = json.loads(row[0])
    return found


def tables(found: Any) -> list[dict[str, Any]]:
    """Every table access of a plan, subqueries' included. A table read through a unique key
    while the plan was made (``const``) has no rows counted; one whose key matched nothing is
    not listed at all (the plan says ``Impossible WHERE`` or ``no matching row``)."""
    accesses: list[dict[str, Any]] = []
    if isinstance(found, dict):
        if "table_name" in found:
            accesses.append(found)
        for value in found.values():
            accesses += tables(value)
    elif isinstance(found, list):
        for value in found:
            accesses += tables(value)
    return accesses


def sorts(found: Any) -> bool:
    """Whether a plan sorts rows or collects them in a temporary table."""
    text = json.dumps(found)
    return any(f'"{word}"' in text for word in ("filesort", "read_sorted_file", "temporary_table"))
