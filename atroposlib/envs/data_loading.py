"""Rows for environments: a local file in the hub set's own schema, or the hub loader by default.

Every environment in ``environments/`` reads its data through :func:`load_rows`: ``--env.dataset_path`` /
``--env.eval_dataset_path`` name a local file (JSONL, JSON, Parquet or CSV, chosen by suffix); without one
the environment's hub loader runs (``datasets.load_dataset(...)`` on its hub set). Either way every row is
checked for the fields the environment needs, so a bad file stops the environment at start-up with one line
naming the file, the row and the field, and an empty set is an error rather than an endless wait.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Optional

LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


class DatasetError(ValueError):
    """A data set that cannot be used: missing file, unknown format, missing field, or no rows.

    The message is one line that names the source (file path or hub name), and where it applies the
    row (0-based) and the field.
    """


def read_local_rows(path: str | Path) -> list[dict[str, Any]]:
    """All rows of a local JSONL, JSON (a list of objects), Parquet or CSV file, as dicts.

    Raises :class:`DatasetError` when the file is missing, its suffix is not one of ``LOCAL_FORMATS``,
    or it cannot be parsed.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in LOCAL_FORMATS:
        raise DatasetError(f"{path}: unknown format {suffix!r} (use one of {', '.join(LOCAL_FORMATS)})")
    if suffix in (".jsonl", ".json"):
        return _read_json_rows(path)
    from datasets import load_dataset

    try:
        data = load_dataset(LOCAL_FORMATS[suffix], data_files=str(path), split="train")
    except Exception as exc:
        raise DatasetError(f"{path}: cannot read it as {suffix[1:]}: {exc}") from None
    return [dict(row) for row in data]


def _read_json_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if path.suffix.lower() == ".json" and stripped.startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: not valid JSON ({exc})") from None
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                raise DatasetError(f"{path}: row {index}: not a JSON object")
        return rows
    rows = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: line {line_number}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise DatasetError(f"{path}: line {line_number}: not a JSON object")
        rows.append(row)
    return rows


def check_rows(rows: Sequence[dict[str, Any]], required: Sequence[str], source: str) -> None:
    """Raise :class:`DatasetError` for an empty set or the first row lacking a required field.

    A field counts as missing when absent or None.
    """
    if not rows:
        raise DatasetError(f"{source}: no rows")
    for index, row in enumerate(rows):
        for field in required:
            if row.get(field) is None:
                raise DatasetError(f"{source}: row {index}: missing field {field!r}")


def load_rows(
    path: Optional[str | Path],
    hub_loader: Callable[[], Iterable[dict[str, Any]]],
    required: Sequence[str],
    hub_name: str,
    limit: Optional[int] = None,
) -> list[dict[str, Any]]:
    """Rows from ``path`` when given, else from ``hub_loader()``; checked by :func:`check_rows`.

    ``hub_name`` names the hub source in errors. ``limit`` keeps the first rows only. A hub loader that
    fails (no network, unknown set) raises :class:`DatasetError` naming ``hub_name`` and suggesting
    ``--env.dataset_path``.
    """
    if path:
        rows = read_local_rows(path)
        source = str(path)
    else:
        try:
            rows = [dict(row) for row in hub_loader()]
        except DatasetError:
            raise
        except Exception as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise DatasetError(
                f"{hub_name}: cannot load from the hub ({first_line}); "
                "pass --env.dataset_path FILE to train on a local copy"
            ) from None
        source = hub_name
    if limit is not None:
        rows = rows[:limit]
    check_rows(rows, required, source)
    return rows


def hub_split(name: str, split: str, config: Optional[str] = None, **kwargs: Any) -> Callable[[], Any]:
    """A hub loader for :func:`load_rows`: ``datasets.load_dataset(name, config, split=split)`` when called."""

    def load():
        from datasets import load_dataset

        return load_dataset(name, config, split=split, **kwargs)

    return load


def seeded_split(
    items: Sequence[Any], seed: int, train_share: float = 0.8, min_eval: int = 1
) -> tuple[list[Any], list[Any]]:
    """``(training, evaluation)``: ``items`` shuffled by ``random.Random(seed)`` (``items`` itself is left as it
    is), the first ``train_share`` of them (at least one) for training and the rest for evaluation; when that
    leaves nothing to evaluate on, the last ``min_eval`` shuffled items are held out as well as trained on."""
    shuffled = list(items)
    random.Random(seed).shuffle(shuffled)
    cut = max(1, int(len(shuffled) * train_share))
    return shuffled[:cut], shuffled[cut:] or shuffled[-min_eval:]
