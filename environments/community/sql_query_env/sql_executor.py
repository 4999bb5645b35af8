"""Running SQL against one WikiSQL table in an in-memory SQLite database, read-only and time-limited.

The model's query runs in the environment's process, so the database is locked down before it does: an
authorizer allows reading the table and calling functions and nothing else (no ``ATTACH`` of files, no
``PRAGMA``, no writes, no schema changes), extension loading stays off, a progress handler aborts a query
after ``time_limit`` seconds and at most ``max_rows`` rows are fetched. Only one statement runs.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Sequence
from typing import Any, Optional

#: authorizer actions a query may take: read columns, select, call functions, recursive CTEs
_ALLOWED = {sqlite3.SQLITE_READ, sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
#: column affinity for WikiSQL's column types
_AFFINITY = {"real": "REAL", "number": "REAL"}


def quote_identifier(name: str) -> str:
    """``name`` as a double-quoted SQLite identifier."""
    return '"' + name.replace('"', '""') + '"'


def table_database(
    header: Sequence[str], rows: Sequence[Sequence[Any]], types: Sequence[str] = ()
) -> sqlite3.Connection:
    """An in-memory database holding table ``data`` (also readable as ``"table"``, as WikiSQL's own SQL names
    it): one column per header name (``REAL`` where ``types`` says ``real``, else ``TEXT``) and ``rows``."""
    conn = sqlite3.connect(":memory:")
    columns = ", ".join(
        f"{quote_identifier(name)} {_AFFINITY.get((types[i] if i < len(types) else 'text').lower(), 'TEXT')}"
        for i, name in enumerate(header)
    )
    conn.execute(f"CREATE TABLE data ({columns})")
    conn.execute('CREATE VIEW "table" AS SELECT * FROM data')
    placeholders = ", ".join("?" for _ in header)
    conn.executemany(
        f"INSERT INTO data VALUES ({placeholders})",
        [[None if value is None else value for value in row] for row in rows],
    )
    conn.commit()
    return conn


def _authorize(action: int, *_: Any) -> int:
    return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY


def run_query(
    conn: sqlite3.Connection,
    sql: str,
    params: Sequence[Any] = (),
    time_limit: float = 2.0,
    max_rows: int = 10_000,
) -> Optional[list[tuple]]:
    """The rows ``sql`` returns, or None when it fails, is not a read-only query, runs over ``time_limit``
    seconds or returns more than ``max_rows`` rows."""
    deadline = time.monotonic() + time_limit
    conn.set_authorizer(_authorize)
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
    try:
        cursor = conn.execute(sql, tuple(params))
        rows = cursor.fetchmany(max_rows + 1)
    except (sqlite3.Error, ValueError, OverflowError):
        return None
    finally:
        conn.set_authorizer(None)
        conn.set_progress_handler(None, 0)
    return None if len(rows) > max_rows else rows


def _normal_value(value: Any) -> Any:
    """A value for comparison: numbers (and numeric text) as floats rounded to 6 places, text folded."""
    if value is None:
        return ("", "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ("n", round(float(value), 6)) if math.isfinite(value) else ("t", str(value))
    text = str(value).strip()
    try:
        number = float(text.replace(",", ""))
    except ValueError:
        return ("t", text.casefold())
    return ("n", round(number, 6)) if math.isfinite(number) else ("t", text.casefold())


def results_match(left: Optional[Sequence[Sequence[Any]]], right: Optional[Sequence[Sequence[Any]]]) -> bool:
    """True when two result sets hold the same rows in any order (numbers by value, text ignoring case and
    surrounding spaces); False when either is None."""
    if left is None or right is None:
        return False

    def normal(rows: Sequence[Sequence[Any]]) -> list[tuple]:
        return sorted((tuple(_normal_value(v) for v in row) for row in rows), key=repr)

    return normal(left) == normal(right)
