"""The rows of an evaluation: the benchmark's hub set by default, or local files in its schema.

:class:`HubSet` names where a benchmark's rows live on the hub: a data set, its configurations (one for most
benchmarks; MMLU has one per subject, BBH one per task) and a split. :func:`load_eval_rows` loads them, or
reads ``--env.dataset_path`` instead:

* a file (JSONL, JSON, Parquet or CSV) in the hub set's own schema;
* a directory, for benchmarks made of several subsets: one file per subset, named after it
  (``anatomy.jsonl``, ``boolean_expressions.json`` ...). When the hub set has named configurations only the
  files named after the selected ones are read; every row gets its subset's name in
  :attr:`HubSet.subset_field` when it does not hold one.

Every row is returned as a :class:`Row` that knows where it came from, so a bad row stops the evaluation
with one line naming the file (or hub set), the row and the field. An unreachable hub is one line too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from atroposlib.envs.data_loading import LOCAL_FORMATS, DatasetError, check_rows, read_local_rows


@dataclass(frozen=True)
class HubSet:
    """A benchmark's rows on the Hugging Face hub: ``load_dataset(name, config, split=split)`` for every
    config in ``configs`` (``(None,)``: the default configuration). A ``name`` holding ``{config}`` names one
    data set per config instead (AGIEval's ``dmayhem93/agieval-{config}``), loaded without a configuration.

    ``subset_field``: the row field that receives the config's name (e.g. ``subject`` for MMLU) when the
    set has several configs, and the file stem when rows come from a directory.
    ``label``: how a config's rows are named in breakdowns and errors (default: the config name).
    """

    name: str
    split: str
    configs: tuple[Optional[str], ...] = (None,)
    subset_field: Optional[str] = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    def source(self, config: Optional[str]) -> tuple[str, Optional[str]]:
        """``(data set, configuration)`` to load for ``config``."""
        if "{config}" in self.name:
            return self.name.format(config=config), None
        return self.name, config

    def describe(self, config: Optional[str] = None) -> str:
        """The data set (``name/config``) and the split, as errors name a hub source."""
        name, sub = self.source(config)
        return f"{name}{'/' + sub if sub else ''} ({self.split})"


@dataclass(frozen=True)
class Row:
    """One data row, with its ``source`` (a file path or a hub set), 0-based ``index`` there and the
    ``subset`` it belongs to (a config name or file stem; None for single-subset sets)."""

    data: dict[str, Any]
    source: str
    index: int
    subset: Optional[str] = None

    def where(self) -> str:
        """``"{source}: row {index}"``, the start of every error about this row."""
        return f"{self.source}: row {self.index}"


class RowError(ValueError):
    """Raised by a benchmark's row reader: ``field`` of the row being read is unusable (``message`` says
    why). The core reports it as a :class:`~atroposlib.envs.data_loading.DatasetError` naming the source
    and the row."""

    def __init__(self, field: str, message: str):
        super().__init__(f"field {field!r} {message}")
        self.field = field


def known_subsets(
    benchmark: str, chosen: Sequence[str], known: Sequence[str], what: str = "subsets"
) -> tuple[str, ...]:
    """``chosen`` as a tuple of configs to load, after checking each is one of ``known``; otherwise a one-line
    :class:`DatasetError` naming the unknown ones and listing the known ones."""
    unknown = [c for c in chosen if c not in known]
    if unknown:
        raise DatasetError(f"{benchmark}: unknown {what} {unknown} (known: {', '.join(known)})")
    return tuple(chosen)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _hub_rows(hub: HubSet, config: Optional[str]) -> list[dict[str, Any]]:
    from datasets import load_dataset

    name, sub = hub.source(config)
    try:
        return [dict(row) for row in load_dataset(name, sub, split=hub.split, **hub.kwargs)]
    except Exception as exc:
        raise DatasetError(
            f"{hub.describe(config)}: cannot load from the hub ({_first_line(exc)}); "
            "pass --env.dataset_path FILE (or a directory of per-subset files) to evaluate on a local copy"
        ) from None


def _directory_files(path: Path, hub: HubSet) -> list[tuple[Optional[str], Path]]:
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in LOCAL_FORMATS)
    named = [c for c in hub.configs if c]
    if named:
        by_stem = {p.stem: p for p in files}
        chosen = [(c, by_stem[c]) for c in named if c in by_stem]
        if not chosen:
            raise DatasetError(
                f"{path}: no file named after a selected subset ({', '.join(named[:5])}"
                f"{', ...' if len(named) > 5 else ''}; e.g. {named[0]}.jsonl)"
            )
        return chosen
    if not files:
        raise DatasetError(f"{path}: no data files ({', '.join(LOCAL_FORMATS)}) in this directory")
    return [(p.stem, p) for p in files]


def load_eval_rows(
    dataset_path: Optional[str | Path],
    hub: HubSet,
    required: Sequence[str] = (),
    hub_loader: Optional[Callable[[HubSet, Optional[str]], Iterable[dict[str, Any]]]] = None,
) -> list[Row]:
    """The rows of ``hub`` (every config, in order), or of ``dataset_path`` (a file or a directory, see
    the module docstring), each checked for the ``required`` fields.

    ``hub_loader(hub, config)`` replaces the default ``datasets.load_dataset`` call (for sets that need
    another loader). Raises :class:`DatasetError` (one line) for an unreachable hub, a missing or
    unreadable file, an empty set or a row lacking a required field.
    """
    parts: list[tuple[str, Optional[str], list[dict[str, Any]]]] = []
    if dataset_path:
        path = Path(dataset_path)
        if path.is_dir():
            for subset, file in _directory_files(path, hub):
                parts.append((str(file), subset, read_local_rows(file)))
        else:
            parts.append((str(path), None, read_local_rows(path)))
    else:
        load = hub_loader or _hub_rows
        for config in hub.configs:
            try:
                rows = [dict(r) for r in load(hub, config)]
            except DatasetError:
                raise
            except Exception as exc:
                raise DatasetError(
                    f"{hub.describe(config)}: cannot load from the hub ({_first_line(exc)}); "
                    "pass --env.dataset_path FILE to evaluate on a local copy"
                ) from None
            parts.append((hub.describe(config), config if len(hub.configs) > 1 else None, rows))
    out: list[Row] = []
    for source, subset, rows in parts:
        if hub.subset_field and subset is not None:
            for row in rows:
                if row.get(hub.subset_field) in (None, ""):
                    row[hub.subset_field] = subset
        check_rows(rows, required, source)
        out.extend(Row(row, source, index, subset) for index, row in enumerate(rows))
    return out


__all__ = ["HubSet", "Row", "RowError", "known_subsets", "load_eval_rows"]
