"""The viewer's in-memory list of groups, fed by one source and shared by all browser sessions."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

from atroposlib.cli._tooling.client import ApiClient, EndpointMissing
from atroposlib.cli._tooling.errors import ToolError
from atroposlib.cli._tooling.sources import (
    GroupRecord,
    InspectPoller,
    JsonlGroupFile,
    LatestExamplePoller,
    PollResult,
)


class Source(Protocol):
    def poll(self) -> PollResult: ...


class JsonlTail:
    """Follows a JSONL file of groups as it grows (e.g. while ``process`` is still writing it)."""

    def __init__(self, path: str | Path) -> None:
        self.reader = JsonlGroupFile(path)
        self.problems = self.reader.problems

    def poll(self) -> PollResult:
        return PollResult(self.reader.read_new(final=False))


class ReadOnlyApiSource:
    """Reads a live API without changing it: ``/inspect/recent``, or ``/latest_example`` on servers
    that lack the inspection endpoints (then ``notice`` says so)."""

    def __init__(self, client: ApiClient, limit: int = 64, env_id: int | None = None) -> None:
        self.inspect: InspectPoller | None = InspectPoller(client, limit=limit, env_id=env_id)
        self.fallback = LatestExamplePoller(client)
        self.problems = self.inspect.problems
        self.notice: str | None = None

    def poll(self) -> PollResult:
        if self.inspect is not None:
            try:
                return self.inspect.poll()
            except EndpointMissing:
                self.inspect = None
                self.notice = (
                    "this API has no /inspect endpoints: following /latest_example (only the newest group "
                    "at each refresh is seen)"
                )
        return self.fallback.poll()


class GroupStore:
    """Up to ``max_groups`` most recent groups, in arrival order, keyed by an increasing int.

    ``refresh()`` polls the source at most once per ``min_interval`` seconds however many sessions
    ask; a failing source leaves the groups in place and sets ``error`` until it answers again.
    """

    def __init__(self, source: Source | None, max_groups: int = 1000, min_interval: float = 1.0) -> None:
        self.source = source
        self.max_groups = max(1, max_groups)
        self.min_interval = min_interval
        self.error: str | None = None
        self.current_step: int | None = None
        self.missed = 0
        self.version = 0  # bumped whenever groups are added
        self._groups: OrderedDict[int, GroupRecord] = OrderedDict()
        self._next_key = 0
        self._last_poll = float("-inf")
        self._lock = threading.Lock()

    def add(self, records: list[GroupRecord]) -> list[int]:
        """Append records; returns their keys. Oldest groups beyond ``max_groups`` are dropped."""
        keys = []
        with self._lock:
            for record in records:
                self._groups[self._next_key] = record
                keys.append(self._next_key)
                self._next_key += 1
            while len(self._groups) > self.max_groups:
                self._groups.popitem(last=False)
            if records:
                self.version += 1
        return keys

    def refresh(self, force: bool = False) -> None:
        """Poll the source for new groups (throttled unless ``force``)."""
        if self.source is None:
            return
        now = time.monotonic()
        with self._lock:
            if not force and now - self._last_poll < self.min_interval:
                return
            self._last_poll = now
        try:
            result = self.source.poll()
        except ToolError as exc:
            self.error = str(exc)
            return
        self.error = None
        if result.current_step is not None:
            self.current_step = result.current_step
        self.missed += result.missed
        self.add(result.records)

    def items(self, env: str | None = None) -> list[tuple[int, GroupRecord]]:
        """``[(key, record), ...]`` oldest first, optionally only one env's (by label)."""
        with self._lock:
            pairs = list(self._groups.items())
        return [(k, r) for k, r in pairs if env is None or r.label == env]

    def get(self, key: int) -> GroupRecord | None:
        with self._lock:
            return self._groups.get(key)

    def env_labels(self) -> list[str]:
        """Distinct env labels seen, in first-seen order."""
        seen: dict[str, None] = {}
        for _, record in self.items():
            seen.setdefault(record.label, None)
        return list(seen)

    def all_scores(self, env: str | None = None) -> list[float]:
        return [float(s) for _, r in self.items(env) for s in r.group.get("scores") or []]


def navigate(keys: list[int], current: int | None, action: str) -> int | None:
    """The key to show after ``action`` ("first", "prev", "next", "last", "stay") from ``current``.

    An unknown or missing ``current`` counts as the newest group. Moves stop at the ends.
    """
    if not keys:
        return None
    idx = keys.index(current) if current in keys else len(keys) - 1
    if action == "first":
        idx = 0
    elif action == "prev":
        idx = max(0, idx - 1)
    elif action == "next":
        idx = min(len(keys) - 1, idx + 1)
    elif action == "last":
        idx = len(keys) - 1
    return keys[idx]
