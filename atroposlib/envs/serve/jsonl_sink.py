"""Append-only JSONL files written by an environment: accepted groups and undeliverable payloads.

Every line is flushed as soon as it is written, so a killed process loses at most the line being written.
numpy values are serialised natively.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Optional

import orjson

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


def first_free_path(path: str | Path) -> Path:
    """``path`` if it does not exist, else ``<stem>_<k><suffix>`` for the first free ``k >= 1``."""
    path = Path(path)
    if not path.exists():
        return path
    k = 1
    while True:
        candidate = path.with_name(f"{path.stem}_{k}{path.suffix}")
        if not candidate.exists():
            return candidate
        k += 1


class JsonlWriter:
    """A JSONL file opened for appending (created with its parent directories on first write)."""

    def __init__(self, path: str | Path, mode: str = "a"):
        self.path = Path(path)
        self._mode = mode
        self._fh: Optional[IO[bytes]] = None
        self._lock = threading.Lock()
        self.lines_written = 0

    def open(self) -> JsonlWriter:
        """Create/truncate (mode "w") or open (mode "a") the file now rather than on the first write."""
        with self._lock:
            self._open()
        return self

    def _open(self) -> IO[bytes]:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, self._mode + "b")  # noqa: SIM115 - kept open across writes
        return self._fh

    def write(self, obj: Any) -> None:
        """Append ``obj`` as one JSON line and flush it to the OS (raises ``TypeError`` for non-JSON values)."""
        try:
            line = orjson.dumps(obj, option=_OPTIONS, default=_fallback)
        except orjson.JSONEncodeError as exc:
            raise TypeError(str(exc)) from None
        with self._lock:
            fh = self._open()
            fh.write(line)
            fh.flush()
            self.lines_written += 1

    def fsync(self) -> None:
        with self._lock:
            if self._fh is not None:
                os.fsync(self._fh.fileno())

    def close(self) -> None:
        """Close the file (idempotent; a later write reopens it for appending)."""
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
                self._mode = "a"

    @property
    def closed(self) -> bool:
        return self._fh is None


def _fallback(value: Any) -> Any:
    for attr in ("tolist", "model_dump", "item"):
        fn = getattr(value, attr, None)
        if callable(fn):
            return fn()
    raise TypeError(f"value of type {type(value).__name__} is not JSON serializable")


class UnsentGroupsFile:
    """Where payloads the API would not take are kept: one JSON line per payload.

    Line format: ``{"time": <unix s>, "endpoint": "/scored_data" | "/scored_data_list", "reason": str,
    "payload": <group or list of groups>}``. Lines are fsynced: this file holds data that exists nowhere else.
    """

    def __init__(self, path: str | Path):
        self._writer = JsonlWriter(path, mode="a")

    @property
    def path(self) -> Path:
        return self._writer.path

    def append(self, payload: Any, *, endpoint: str, reason: str) -> Path:
        self._writer.write({"time": time.time(), "endpoint": endpoint, "reason": reason, "payload": payload})
        self._writer.fsync()
        return self.path

    @property
    def count(self) -> int:
        return self._writer.lines_written

    def close(self) -> None:
        self._writer.close()


def read_unsent_groups(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the records of an :class:`UnsentGroupsFile` (skipping a torn last line)."""
    with open(path, "rb") as fh:
        for raw in fh:
            raw = raw.strip()
            if not raw:
                continue
            try:
                yield orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue


__all__ = ["JsonlWriter", "UnsentGroupsFile", "first_free_path", "read_unsent_groups"]
