"""The scored items of an evaluation, appended as they finish, so an interrupted run can resume.

Every finished item is one JSON line of ``samples.journal.jsonl`` in the evaluation's output directory:
``{"key": ..., "samples": [...]}``. The key (:func:`item_key`) digests the item's id, the exact messages
sent, the sampling parameters and the model, so a run resumed with ``--env.resume true`` reuses an item's
replies and scores only when it would ask the model exactly the same thing again. A line cut short by a
kill is ignored.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Optional

logger = logging.getLogger(__name__)

JOURNAL_NAME = "samples.journal.jsonl"


def item_key(item_id: str, messages: Any, generation: dict[str, Any], model: Optional[str]) -> str:
    """A digest of what asking the model about this item would send (see the module docstring)."""
    payload = json.dumps(
        {"id": item_id, "messages": messages, "generation": generation, "model": model},
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, 2)
        return fh.read(1) == b"\n"


class Journal:
    """Appends scored items to ``path`` (one line each, flushed) and reads them back."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file: Any = None

    def load(self) -> dict[str, list[dict[str, Any]]]:
        """key -> the sample records of every complete line (a later line for a key wins)."""
        done: dict[str, list[dict[str, Any]]] = {}
        if not self.path.is_file():
            return done
        with open(self.path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                try:
                    entry = json.loads(line)
                    done[str(entry["key"])] = list(entry["samples"])
                except (ValueError, KeyError, TypeError):
                    logger.info("%s: line %d is incomplete; its item is asked again", self.path, number)
        return done

    def reset(self) -> None:
        """Forget everything recorded so far."""
        self.close()
        self.path.unlink(missing_ok=True)

    def append(self, key: str, samples: list[dict[str, Any]], default: Any = str) -> None:
        """Record one scored item."""
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            cut = self.path.is_file() and self.path.stat().st_size > 0 and not _ends_with_newline(self.path)
            self._file = open(self.path, "a", encoding="utf-8")
            if cut:  # a line cut short by a kill: end it, so the next record starts a line of its own
                self._file.write("\n")
        self._file.write(json.dumps({"key": key, "samples": samples}, default=default) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


__all__ = ["JOURNAL_NAME", "Journal", "item_key"]
