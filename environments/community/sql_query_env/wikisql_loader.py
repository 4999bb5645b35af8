"""WikiSQL rows: the original's download of Salesforce's release, local files, and the task items they give.

By default the data is the WikiSQL release the original fetched (``data.tar.bz2`` from Salesforce's GitHub,
unpacked once into ``~/.cache/wikisql`` or ``$WIKISQL_CACHE_DIR``): ``{split}.jsonl`` questions joined with
``{split}.tables.jsonl`` tables. Local files (``--env.dataset_path``) use the hub set's own schema
(``Salesforce/wikisql``), one row per question:

* ``question``: the natural-language question;
* ``table``: ``header`` (column names), ``rows`` (lists of cells), optional ``types`` (``text`` / ``real``);
* ``sql``: ``sel`` (selected column index), ``agg`` (0 none, 1 MAX, 2 MIN, 3 COUNT, 4 SUM, 5 AVG) and
  ``conds``, either the hub's ``{"column_index": [...], "operator_index": [...], "condition": [...]}`` or the
  release's list of ``[column, operator, value]`` (operators 0 ``=``, 1 ``>``, 2 ``<``).

The gold query is built from ``sql`` with its values as bound parameters, so no value needs quoting.
"""

from __future__ import annotations

import json
import os
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from atroposlib.envs.data_loading import DatasetError, check_rows

WIKISQL_DATA_URL = "https://github.com/salesforce/WikiSQL/raw/master/data.tar.bz2"
AGG_OPS = ("", "MAX", "MIN", "COUNT", "SUM", "AVG")
COND_OPS = ("=", ">", "<")


@dataclass(frozen=True)
class SQLItem:
    """One question on one table, with the gold query (``gold_sql`` and its bound ``gold_params``) and the
    same query written out for people (``readable_sql``)."""

    question: str
    header: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    types: tuple[str, ...]
    gold_sql: str
    gold_params: tuple[Any, ...]
    readable_sql: str


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: Any) -> str:
    """``value`` as an SQL literal (text in single quotes)."""
    return "'" + value.replace("'", "''") + "'" if isinstance(value, str) else repr(value)


def _conditions(sql: dict[str, Any], where: str) -> list[tuple[int, int, Any]]:
    conds = sql.get("conds") or []
    if isinstance(conds, dict):
        try:
            return list(zip(conds["column_index"], conds["operator_index"], conds["condition"], strict=True))
        except (KeyError, TypeError, ValueError):
            raise DatasetError(
                f"{where}: field 'sql.conds' needs equally long column_index, operator_index, condition"
            )
    if not all(isinstance(c, (list, tuple)) and len(c) == 3 for c in conds):
        raise DatasetError(f"{where}: field 'sql.conds' must hold [column, operator, value] triples")
    return [tuple(c) for c in conds]


def item_from_row(row: dict[str, Any], source: str, index: int) -> SQLItem:
    """The task item of a row in the hub schema; :class:`DatasetError` naming ``source``, the row and the field
    when something is missing or out of range."""
    where = f"{source}: row {index}"
    table, sql = row.get("table"), row.get("sql")
    if not isinstance(table, dict) or not table.get("header"):
        raise DatasetError(f"{where}: missing field 'table.header'")
    if not isinstance(sql, dict) or sql.get("sel") is None or sql.get("agg") is None:
        raise DatasetError(f"{where}: missing field 'sql.sel' or 'sql.agg'")
    header = tuple(str(h) for h in table["header"])
    rows = tuple(tuple(r) for r in table.get("rows") or [])
    types = tuple(str(t) for t in table.get("types") or ["text"] * len(header))
    sel, agg = int(sql["sel"]), int(sql["agg"])
    if not 0 <= sel < len(header):
        raise DatasetError(f"{where}: field 'sql.sel' is {sel}, but the table has {len(header)} columns")
    if not 0 <= agg < len(AGG_OPS):
        raise DatasetError(f"{where}: field 'sql.agg' is {agg}, not 0-{len(AGG_OPS) - 1}")
    column = _quote(header[sel])
    select = f"{AGG_OPS[agg]}({column})" if agg else column
    clauses, readable, params = [], [], []
    for col, op, value in _conditions(sql, where):
        col, op = int(col), int(op)
        if not 0 <= col < len(header) or not 0 <= op < len(COND_OPS):
            raise DatasetError(f"{where}: field 'sql.conds' names column {col} / operator {op}, out of range")
        numeric = (types[col] if col < len(types) else "text").lower() == "real"
        collate = " COLLATE NOCASE" if COND_OPS[op] == "=" and not numeric else ""
        clauses.append(f"{_quote(header[col])} {COND_OPS[op]} ?{collate}")
        readable.append(f"{_quote(header[col])} {COND_OPS[op]} {_literal(value)}{collate}")
        params.append(value)
    where_sql = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    where_text = f" WHERE {' AND '.join(readable)}" if readable else ""
    return SQLItem(
        question=str(row["question"]),
        header=header,
        rows=rows,
        types=types,
        gold_sql=f"SELECT {select} FROM data{where_sql}",
        gold_params=tuple(params),
        readable_sql=f"SELECT {select} FROM data{where_text}",
    )


def items_from_rows(rows: list[dict[str, Any]], source: str) -> list[SQLItem]:
    """Items for rows in the hub schema (checked for ``question``, ``table`` and ``sql``)."""
    check_rows(rows, ["question", "table", "sql"], source)
    return [item_from_row(row, source, i) for i, row in enumerate(rows)]


def cache_dir(configured: Optional[str] = None) -> Path:
    """Where the release is unpacked: ``configured``, ``$WIKISQL_CACHE_DIR`` or ``~/.cache/wikisql``."""
    return Path(configured or os.environ.get("WIKISQL_CACHE_DIR") or Path.home() / ".cache" / "wikisql")


def download_wikisql(directory: Path) -> Path:
    """The release's ``data`` folder under ``directory``, downloaded and unpacked when missing."""
    data = directory / "data"
    if (data / "train.jsonl").exists() and (data / "test.tables.jsonl").exists():
        return data
    directory.mkdir(parents=True, exist_ok=True)
    archive = directory / "data.tar.bz2"
    try:
        if not archive.exists():
            urllib.request.urlretrieve(WIKISQL_DATA_URL, archive)
        with tarfile.open(archive, "r:bz2") as tar:
            tar.extractall(directory, filter="data")
    except Exception as exc:
        archive.unlink(missing_ok=True)
        raise DatasetError(
            f"WikiSQL ({WIKISQL_DATA_URL}): cannot download ({exc}); pass --env.dataset_path FILE for a local copy"
        ) from None
    return data


def release_rows(split: str, directory: Path) -> list[dict[str, Any]]:
    """The rows of a release split (``train``, ``dev`` or ``test``) in the hub schema, questions whose table
    is missing left out."""
    data = download_wikisql(directory)
    tables: dict[str, dict[str, Any]] = {}
    for line in (data / f"{split}.tables.jsonl").read_text(encoding="utf-8").splitlines():
        table = json.loads(line)
        tables[table["id"]] = {"header": table["header"], "rows": table["rows"], "types": table.get("types")}
    rows = []
    for line in (data / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
        question = json.loads(line)
        table = tables.get(question["table_id"])
        if table and table["header"]:
            rows.append({"question": question["question"], "table": table, "sql": question["sql"]})
    return rows
