"""BFCL's question and possible-answer files, as shipped by the ``bfcl-eval`` package.

``bfcl-eval`` pins old numpy/networkx/filelock and pulls vendor SDKs, so it is installed without its
dependencies (``python -m atroposlib.evals.bfcl install``, run by ``scripts/install.sh``); only its data
files and its AST checker are used, and those need nothing beyond the standard library.

A category's questions are ``bfcl_eval/data/BFCL_v4_<category>.json`` (JSON lines: ``id``,
``question`` (a list of turns, each a list of ``{"role", "content"}`` messages; single-turn categories
have one turn) and ``function`` (the callable functions, in BFCL's Gorilla schema)); its possible answers
are ``data/possible_answer/BFCL_v4_<category>.json`` (``id``, ``ground_truth``: a list of
``{function_name: {parameter: [acceptable values]}}``). Relevance and irrelevance categories have no
possible answers. ``--env.dataset_path DIR`` reads the same layout from a directory of one's own.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

from atroposlib.envs.data_loading import DatasetError, read_local_rows

#: The ``bfcl-eval`` release whose data and checker are used (installed with ``--no-deps``).
BFCL_EVAL_REQUIREMENT = "bfcl-eval==2026.3.23"
VERSION_PREFIX = "BFCL_v4"

#: Categories scored by BFCL's AST checker (calls compared with the possible answers).
AST_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
#: Categories scored on whether the reply calls a function at all.
RELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance")
CATEGORIES = AST_CATEGORIES + RELEVANCE_CATEGORIES
#: Short names accepted for categories (the leaderboard's v1-v3 name of simple_python).
ALIASES = {"simple": "simple_python"}


class BfclUnavailable(DatasetError):
    """The ``bfcl-eval`` package is not installed (the message says how to install it)."""


def canonical_category(name: str) -> str:
    """The BFCL v4 name of ``name`` (``simple`` -> ``simple_python``); :class:`DatasetError` for a
    category this evaluation cannot score (one line listing the ones it can)."""
    category = ALIASES.get(name.strip(), name.strip())
    if category not in CATEGORIES:
        raise DatasetError(
            f"BFCL: unknown or unsupported category {name!r}; choose from {', '.join(CATEGORIES)}"
        )
    return category


def bfcl_package() -> ModuleType:
    """The installed ``bfcl_eval`` package, imported from its distribution's location, so that a file named
    ``bfcl_eval.py`` first on ``sys.path`` (``environments/eval_environments/bfcl_eval.py`` run as a script)
    cannot shadow it. :class:`BfclUnavailable` when ``bfcl-eval`` is not installed."""
    module = sys.modules.get("bfcl_eval")
    if module is not None and getattr(module, "__path__", None):
        return module
    try:
        location = metadata.distribution("bfcl-eval").locate_file("")
    except metadata.PackageNotFoundError:
        location = None
    spec = importlib.machinery.PathFinder.find_spec("bfcl_eval", [str(location)]) if location else None
    if spec is None or spec.loader is None:
        raise BfclUnavailable(
            f"BFCL needs the {BFCL_EVAL_REQUIREMENT} package, installed without its dependencies: "
            "run `python -m atroposlib.evals.bfcl install` (scripts/install.sh does)"
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules["bfcl_eval"] = module
    spec.loader.exec_module(module)
    return module


def package_data_dir() -> Path:
    """The ``data`` directory of the installed ``bfcl_eval`` package (:class:`BfclUnavailable` when it is not
    installed)."""
    return Path(list(bfcl_package().__path__)[0]) / "data"


@dataclass(frozen=True)
class BfclItem:
    """One BFCL test entry: its ``id`` and ``category``, the chat ``messages`` of its (single) turn, the
    ``functions`` it may call (BFCL's schema) and its ``ground_truth`` (None for relevance categories)."""

    id: str
    category: str
    messages: tuple[dict[str, str], ...]
    functions: tuple[dict[str, Any], ...]
    ground_truth: Optional[tuple[dict[str, Any], ...]]


def _field(row: dict[str, Any], name: str, kind: type, path: Path, index: int) -> Any:
    value = row.get(name)
    if not isinstance(value, kind):
        raise DatasetError(f"{path}: row {index}: field {name!r} is missing or not a {kind.__name__}")
    return value


def _messages(question: list[Any], path: Path, index: int) -> tuple[dict[str, str], ...]:
    if len(question) != 1 or not isinstance(question[0], list):
        raise DatasetError(
            f"{path}: row {index}: field 'question' must hold exactly one turn (a list of messages)"
        )
    messages = []
    for position, message in enumerate(question[0]):
        if not isinstance(message, dict) or not all(
            isinstance(message.get(k), str) for k in ("role", "content")
        ):
            raise DatasetError(f"{path}: row {index}: question[0][{position}] lacks 'role' or 'content'")
        messages.append({"role": message["role"], "content": message["content"]})
    return tuple(messages)


def load_category(category: str, data_dir: Optional[Path] = None) -> list[BfclItem]:
    """The entries of ``category`` (see :func:`canonical_category`) from ``data_dir`` (default: the
    installed package's data), joined with their possible answers by ``id``.

    Raises :class:`DatasetError` (one line naming the file, row and field) for a missing file, a row
    that is not JSON, a missing field, or an entry without a possible answer.
    """
    category = canonical_category(category)
    root = Path(data_dir) if data_dir is not None else package_data_dir()
    path = root / f"{VERSION_PREFIX}_{category}.json"
    answers: dict[str, tuple[dict[str, Any], ...]] = {}
    if category in AST_CATEGORIES:
        answer_path = root / "possible_answer" / path.name
        for index, row in enumerate(read_local_rows(answer_path)):
            entry_id = _field(row, "id", str, answer_path, index)
            answers[entry_id] = tuple(_field(row, "ground_truth", list, answer_path, index))
    items = []
    for index, row in enumerate(read_local_rows(path)):
        entry_id = _field(row, "id", str, path, index)
        functions = _field(row, "function", list, path, index)
        messages = _messages(_field(row, "question", list, path, index), path, index)
        truth = None
        if category in AST_CATEGORIES:
            if entry_id not in answers:
                raise DatasetError(f"{path}: row {index}: no possible answer with id {entry_id!r}")
            truth = answers[entry_id]
        items.append(BfclItem(entry_id, category, messages, tuple(functions), truth))
    return items
