"""Where the tools get scored groups from, without disturbing a live run.

* :class:`JsonlGroupFile` reads (and can follow) a JSONL file written by an environment's ``process``
  command or by ``--env.data_path_to_save_groups``: one group dict per line. Malformed lines are
  skipped and reported, never fatal.
* :class:`InspectPoller` reads ``GET /inspect/recent`` (read-only) and hands out each group once,
  deduplicated by the server's ``seq`` number.
* :class:`LatestExamplePoller` is the read-only fallback for servers without ``/inspect``
  (atroposlib 0.4.0): it follows ``GET /latest_example``.
* :class:`BatchConsumer` takes batches with ``GET /batch``. This steals them from the trainer, so
  tools use it only with ``--consume``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from atroposlib.cli._tooling.client import ApiClient
from atroposlib.cli._tooling.errors import ToolError


@dataclass(frozen=True)
class GroupRecord:
    """One scored group plus where it came from.

    ``seq`` is the API's receive sequence number (or the JSONL line number), ``step`` the trainer
    step at which the API received it (None for files), ``origin`` a short human label.
    """

    group: dict[str, Any]
    seq: int | None = None
    env_id: int | None = None
    env_name: str | None = None
    step: int | None = None
    received_at: float | None = None
    origin: str = ""

    @property
    def label(self) -> str:
        """``env_name`` if known, else ``env <id>``, else ``unknown env``."""
        if self.env_name:
            return self.env_name
        if self.env_id is not None:
            return f"env {self.env_id}"
        return "unknown env"


def group_problem(group: Any) -> str | None:
    """Why ``group`` cannot be shown or sampled, or None if it is usable.

    Usable = a JSON object with a ``scores`` list of finite numbers and, per score, a ``tokens``
    row or a ``messages`` entry.
    """
    if not isinstance(group, dict):
        return f"expected a JSON object, got {type(group).__name__}"
    scores = group.get("scores")
    if not isinstance(scores, list) or not scores:
        return "no 'scores' list"
    for s in scores:
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
            return f"non-numeric or non-finite score {s!r}"
    tokens, messages = group.get("tokens"), group.get("messages")
    if tokens is None and not messages:
        return "neither 'tokens' nor 'messages'"
    if tokens is not None and (not isinstance(tokens, list) or len(tokens) != len(scores)):
        return f"{len(scores)} scores but {len(tokens) if isinstance(tokens, list) else 'no'} token rows"
    masks = group.get("masks")
    if isinstance(tokens, list) and isinstance(masks, list) and len(masks) != len(tokens):
        return f"{len(tokens)} token rows but {len(masks)} mask rows"
    if tokens is None and (not isinstance(messages, list) or len(messages) != len(scores)):
        return f"{len(scores)} scores but {len(messages) if isinstance(messages, list) else 'no'} messages"
    return None


@dataclass
class Problems:
    """Counts and first examples of skipped input, for one summary message."""

    examples: list[str] = field(default_factory=list)
    count: int = 0
    max_examples: int = 5

    def add(self, where: str, what: str) -> None:
        self.count += 1
        if len(self.examples) < self.max_examples:
            self.examples.append(f"{where}: {what}")

    def summary(self, noun: str = "lines") -> str | None:
        if not self.count:
            return None
        more = f" (+{self.count - len(self.examples)} more)" if self.count > len(self.examples) else ""
        return f"skipped {self.count} {noun}: " + "; ".join(self.examples) + more


class JsonlGroupFile:
    """Incremental reader of a JSONL file of groups; ``read_new()`` returns lines added since last call.

    A last line without a newline is taken only if it parses (a writer may be mid-line) or when
    ``final=True``. Raises ToolError if the file does not exist or cannot be read.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ToolError(f"input file {self.path} does not exist or is not a file")
        self.offset = 0
        self.line_no = 0
        self.problems = Problems()

    def read_new(self, final: bool = False) -> list[GroupRecord]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError as exc:
            raise ToolError(f"cannot read {self.path}: {exc.strerror or exc}")
        records: list[GroupRecord] = []
        pos = 0
        while pos < len(data):
            end = data.find(b"\n", pos)
            complete = end != -1
            raw = data[pos : end if complete else len(data)]
            if not complete and not final:
                try:
                    orjson.loads(raw)
                except orjson.JSONDecodeError:
                    break  # still being written
            self.line_no += 1
            pos = (end + 1) if complete else len(data)
            record = self._parse(raw)
            if record is not None:
                records.append(record)
        self.offset += pos
        return records

    def _parse(self, raw: bytes) -> GroupRecord | None:
        if not raw.strip():
            return None
        where = f"{self.path.name}:{self.line_no}"
        try:
            group = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            self.problems.add(where, f"invalid JSON ({str(exc).split(':')[0]})")
            return None
        problem = group_problem(group)
        if problem:
            self.problems.add(where, problem)
            return None
        env_id = group.get("env_id") if isinstance(group.get("env_id"), int) else None
        return GroupRecord(
            group=group, seq=self.line_no, env_id=env_id, env_name=self.path.stem, origin=where
        )


def read_jsonl_groups(paths: Iterable[str | Path], problems: Problems | None = None) -> Iterator[GroupRecord]:
    """All usable groups of the given JSONL files, in order; skipped lines go to ``problems``."""
    for path in paths:
        reader = JsonlGroupFile(path)
        if problems is not None:
            reader.problems = problems
        yield from reader.read_new(final=True)


@dataclass
class PollResult:
    """New records from one poll, the trainer's step, and how many groups were missed since last time."""

    records: list[GroupRecord]
    current_step: int | None = None
    missed: int = 0


class InspectPoller:
    """Hands out each group of ``GET /inspect/recent`` once, oldest first (read-only).

    ``limit`` is how many recent groups to ask for per poll. ``include_history=False`` skips the groups
    already in the server's ring at the first poll. ``missed`` counts groups that left the server's ring
    between two polls (only detectable without an env filter).
    """

    def __init__(
        self,
        client: ApiClient,
        limit: int = 256,
        env_id: int | None = None,
        include_history: bool = True,
    ) -> None:
        self.client = client
        self.limit = max(1, int(limit))
        self.env_id = env_id
        self.include_history = include_history
        self.last_seq: int | None = None
        self.problems = Problems()

    def poll(self) -> PollResult:
        data = self.client.inspect_recent(self.limit, self.env_id)
        entries = [e for e in data["groups"] if isinstance(e, dict) and isinstance(e.get("seq"), int)]
        entries.sort(key=lambda e: e["seq"])
        step = data.get("current_step")
        if entries and self.last_seq is not None and entries[-1]["seq"] < self.last_seq:
            self.last_seq = 0  # the server's numbering restarted (reset or fresh store): all are new
        first_poll = self.last_seq is None
        fresh = [e for e in entries if self.last_seq is None or e["seq"] > self.last_seq]
        missed = 0
        if fresh and not first_poll and self.env_id is None:
            missed = max(0, fresh[0]["seq"] - self.last_seq - 1)
        if entries:
            newest = entries[-1]["seq"]
            self.last_seq = newest if self.last_seq is None else max(self.last_seq, newest)
        if first_poll and not self.include_history:
            fresh = []
        records = []
        for e in fresh:
            group = e.get("group")
            problem = group_problem(group)
            if problem:
                self.problems.add(f"seq {e['seq']}", problem)
                continue
            records.append(
                GroupRecord(
                    group=group,
                    seq=e["seq"],
                    env_id=e.get("env_id"),
                    env_name=e.get("env_name"),
                    step=e.get("received_step"),
                    received_at=e.get("received_at"),
                    origin=f"seq {e['seq']}",
                )
            )
        return PollResult(records, step if isinstance(step, int) else None, missed)

    def prime(self) -> None:
        """Mark everything currently on the server as seen (so only later groups are handed out)."""
        self.include_history = False
        if self.last_seq is None:
            self.poll()


class LatestExamplePoller:
    """Read-only fallback for servers without ``/inspect``: follows ``GET /latest_example``.

    It can only see the newest group at each poll, so groups arriving faster than the poll rate are
    not all seen; each distinct group is handed out once.
    """

    def __init__(self, client: ApiClient) -> None:
        self.client = client
        self._last_digest: bytes | None = None
        self._count = 0

    def poll(self) -> PollResult:
        group = self.client.latest_example()
        if group_problem(group):
            return PollResult([])
        digest = hashlib.blake2b(orjson.dumps(group, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()
        if digest == self._last_digest:
            return PollResult([])
        self._last_digest = digest
        self._count += 1
        env_id = group.get("env_id") if isinstance(group.get("env_id"), int) else None
        return PollResult([GroupRecord(group=group, seq=self._count, env_id=env_id, origin="latest_example")])


class BatchConsumer:
    """Takes batches with ``GET /batch`` (the trainer will not see them).

    Each batch is acknowledged (``POST /batch/ack``) once the caller calls :meth:`done`, so the API
    does not replay it to the trainer later.
    """

    def __init__(self, client: ApiClient) -> None:
        self.client = client
        self._env_names: dict[int, str] = {}
        self._pending_ack: int | None = None
        self.problems = Problems()
        self.batches = 0

    def poll(self) -> PollResult:
        groups, batch_id = self.client.get_batch()
        if not groups:
            return PollResult([])
        self.batches += 1
        self._pending_ack = batch_id
        step = None
        try:
            step = self.client.status().get("current_step")
        except ToolError:
            pass
        records = []
        for i, group in enumerate(groups):
            problem = group_problem(group)
            if problem:
                self.problems.add(
                    f"batch {batch_id if batch_id is not None else self.batches} group {i}", problem
                )
                continue
            env_id = group.get("env_id") if isinstance(group.get("env_id"), int) else None
            records.append(
                GroupRecord(
                    group=group,
                    seq=None,
                    env_id=env_id,
                    env_name=self._env_name(env_id),
                    step=step,
                    origin=f"batch {batch_id}" if batch_id is not None else f"batch #{self.batches}",
                )
            )
        return PollResult(records, step)

    def done(self) -> None:
        """Acknowledge the last batch (after its records were safely written or shown)."""
        if self._pending_ack is not None:
            try:
                self.client.ack_batch(self._pending_ack)
            except ToolError:
                pass
            self._pending_ack = None

    def _env_name(self, env_id: int | None) -> str | None:
        if env_id is None:
            return None
        if env_id not in self._env_names:
            try:
                for env in self.client.inspect_envs():
                    if isinstance(env.get("env_id"), int):
                        self._env_names[env["env_id"]] = env.get("real_name") or env.get("desired_name")
            except ToolError:
                pass
        return self._env_names.get(env_id)
