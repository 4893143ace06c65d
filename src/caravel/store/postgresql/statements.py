"""Statements compiled once by SQLAlchemy and run straight on psycopg: on the hot paths
SQLAlchemy's per-execution work would cost about as much as the statement itself. The text and
default parameters are SQLAlchemy's own, so the statement is the one the general path runs."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import sqlalchemy as sa

__all__ = ["compile_for_driver", "execute"]

#: A named parameter as SQLAlchemy writes it for psycopg (``%(name)s``).
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def compile_for_driver(statement: Any, dialect: sa.Dialect) -> tuple[str, dict[str, Any]]:
    """``statement``'s SQL text for psycopg, every parameter sent in binary (``%(name)b``), and
    its default parameters."""
    compiled = statement.compile(dialect=dialect)
    # For lists of text psycopg would otherwise pick the text array format, which quotes
    # element by element.
    return _PLACEHOLDER.sub(r"%(\1)b", str(compiled)), dict(compiled.params)


async def execute(
    driver: psycopg.AsyncConnection[Any], sql: str, params: dict[str, Any]
) -> list[Any]:
    """Run ``sql`` with results in binary, prepared by the server on first use; its rows."""
    async with driver.cursor(binary=True) as cursor:
        await cursor.execute(sql, params, prepare=True)
        return await cursor.fetchall()
