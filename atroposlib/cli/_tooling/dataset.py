"""The driver shared by ``atropos-sft-gen`` and ``atropos-dpo-gen``.

Flow: check the output file (before anything else), load the tokenizer only in text mode, open the
source (JSONL files, the read-only ``/inspect/recent`` of a live API, or ``/batch`` with
``--consume``), then turn groups into records until ``--num-seqs-to-save`` is reached, the input
is exhausted, ``--idle-timeout`` passes without new groups, or the process is signalled.
Every record is flushed as it is written; a run that selects nothing exits 1.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
from tqdm import tqdm

from atroposlib.cli._tooling.client import (
    DEFAULT_API_URL,
    ApiClient,
    AuthRejected,
    EndpointMissing,
    TrainerNotRegistered,
    add_api_key_argument,
    add_register_size_arguments,
    resolve_api_key,
)
from atroposlib.cli._tooling.errors import ToolError
from atroposlib.cli._tooling.formats import FORMATS, GroupView, messages_view, text_view
from atroposlib.cli._tooling.signals import stop_on_signals
from atroposlib.cli._tooling.sources import (
    BatchConsumer,
    GroupRecord,
    InspectPoller,
    JsonlGroupFile,
    PollResult,
    Problems,
)
from atroposlib.cli._tooling.text import load_tokenizer

DEFAULT_TOKENIZER = "NousResearch/DeepHermes-3-Llama-3-8B-Preview"

# records for one group: (view, record, score) -> list of JSON-able dicts
GroupToRecords = Callable[[GroupRecord, GroupView, random.Random], list[dict[str, Any]]]


def add_dataset_arguments(parser: argparse.ArgumentParser, *, default_min_diff: float) -> None:
    """The flags both generators share (compat: atroposlib 0.4.0's flag names and defaults are kept)."""
    parser.add_argument("--api-url", default=DEFAULT_API_URL, help="trajectory API to read from")
    add_api_key_argument(parser)
    add_register_size_arguments(parser)
    parser.add_argument(
        "--tokenizer",
        default=DEFAULT_TOKENIZER,
        help="tokenizer (hub name or local path) used to decode tokens; not loaded with --save-messages",
    )
    parser.add_argument(
        "--save-messages", action="store_true", help="write the groups' chat messages instead of decoded text"
    )
    parser.add_argument(
        "--num-seqs-to-save",
        type=int,
        default=100,
        help="stop once at least this many records are written (<= 0: no limit, read all input)",
    )
    parser.add_argument("--allow-negative-scores", action="store_true", help="also keep scores <= 0")
    parser.add_argument(
        "--minimum-score-diff-max-min",
        type=float,
        default=default_min_diff,
        help="strict score-difference threshold (see CONFIG.md)",
    )
    parser.add_argument("--append-to-previous", action="store_true", help="append to an existing output file")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="atropos",
        help="'atropos': prefix/completion (or messages) with the score; 'trl': the layout TRL's trainers read",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="seed for random choices (deterministic output)"
    )
    src = parser.add_argument_group("source (default: read-only view of a live API)")
    src.add_argument(
        "--input", nargs="+", metavar="JSONL", help="read groups from these `process` JSONL files, not an API"
    )
    src.add_argument(
        "--consume",
        action="store_true",
        help="take batches with GET /batch (the trainer will NOT get them)",
    )
    src.add_argument(
        "--register",
        action="store_true",
        help="with --consume: POST /register first (for a run without a trainer)",
    )
    src.add_argument(
        "--reset",
        action="store_true",
        help="call GET /reset_data first (wipes the run's queue and registration)",
    )
    src.add_argument("--env-id", type=int, default=None, help="only groups of this env (read-only mode)")
    src.add_argument(
        "--only-new", action="store_true", help="skip groups the API already holds at start (read-only mode)"
    )
    src.add_argument("--inspect-limit", type=int, default=256, help="groups asked per /inspect/recent poll")
    src.add_argument("--poll-interval", type=float, default=1.0, help="seconds between polls of the API")
    src.add_argument(
        "--idle-timeout",
        type=float,
        default=0.0,
        help="stop after this many seconds without new groups (0: wait forever)",
    )


def check_output(path: Path, append: bool) -> None:
    """Refuse to overwrite an existing output unless appending. Called before anything else."""
    if path.is_dir():
        raise ToolError(f"output path {path} is a directory")
    if path.exists() and not append:
        raise ToolError(f"output file {path} already exists: pass --append-to-previous to add to it")


def validate_source_flags(args: argparse.Namespace) -> None:
    """Reject flag combinations that make no sense, with a one-line reason."""
    if args.input and (args.consume or args.register or args.reset):
        raise ToolError("--input reads files only; it cannot be combined with --consume/--register/--reset")
    if args.register and not args.consume:
        raise ToolError("--register only makes sense with --consume (read-only mode needs no registration)")
    if args.poll_interval <= 0:
        raise ToolError("--poll-interval must be > 0")
    if args.idle_timeout < 0:
        raise ToolError("--idle-timeout must be >= 0")


class _LazyWriter:
    """Opens the output on the first record, so a failed run leaves no empty file behind."""

    def __init__(self, path: Path, append: bool) -> None:
        self.path = path
        self.append = append
        self._fh: IO[bytes] | None = None

    def write(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            mode = "ab" if self.append and self.path.exists() else "wb"
            try:
                self._fh = self.path.open(mode)
            except OSError as exc:
                raise ToolError(f"cannot write {self.path}: {exc.strerror or exc}")
        for record in records:
            self._fh.write(orjson.dumps(record) + b"\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


@dataclass
class RunStats:
    """What a generator run did, for the final summary line."""

    groups: int = 0
    records: int = 0
    skipped_no_messages: int = 0
    missed: int = 0
    problems: Problems = field(default_factory=Problems)


def _open_live_source(args: argparse.Namespace, client: ApiClient) -> InspectPoller | BatchConsumer:
    client.info()  # reachability and auth check with a clear error
    if args.reset:
        print(f"reset: {client.reset().strip()}", file=sys.stderr)
    if args.consume:
        if args.register:
            client.register(
                batch_size=args.group_size * getattr(args, "tasks_per_step", 8),
                max_token_len=args.max_token_len,
                num_steps=max(args.num_seqs_to_save, 1) * 2,
            )
        return BatchConsumer(client)
    poller = InspectPoller(client, limit=args.inspect_limit, env_id=args.env_id)
    try:
        if args.only_new:
            poller.prime()
    except EndpointMissing:
        raise ToolError(
            f"the API at {args.api_url} has no read-only /inspect endpoints (an older server?): "
            "pass --consume to take batches instead (the trainer will not get them)"
        )
    return poller


def _load_text_tokenizer(name: str, prog: str) -> Any:
    """The tokenizer for text mode: local path or cache first, else the hub (may take a while)."""
    tokenizer = load_tokenizer(name, required=False, local_files_only=True)
    if tokenizer is None:
        print(f"{prog}: loading tokenizer {name!r} from the hub", file=sys.stderr, flush=True)
        tokenizer = load_tokenizer(name, required=True)
    return tokenizer


def run_generator(args: argparse.Namespace, prog: str, to_records: GroupToRecords) -> int:
    """Run a dataset generator. Returns the exit status (0 if any record was written, else 1)."""
    out_path = Path(args.filepath)
    check_output(out_path, args.append_to_previous)
    validate_source_flags(args)
    tokenizer = None if args.save_messages else _load_text_tokenizer(args.tokenizer, prog)
    rng = random.Random(args.seed)
    limit = args.num_seqs_to_save if args.num_seqs_to_save > 0 else None
    stats = RunStats()
    writer = _LazyWriter(out_path, args.append_to_previous)
    client: ApiClient | None = None

    def handle(record: GroupRecord) -> None:
        stats.groups += 1
        if args.save_messages:
            view = messages_view(record.group)
            if view is None:
                stats.skipped_no_messages += 1
                stats.problems.add(record.origin or "group", "no messages (needed by --save-messages)")
                return
        else:
            view = text_view(record.group, tokenizer)
        records = to_records(record, view, rng)
        writer.write(records)
        stats.records += len(records)
        bar.update(len(records))

    def reached() -> bool:
        return limit is not None and stats.records >= limit

    # Every input is opened (files found, API reached) before the progress bar is drawn, so a bad
    # input is reported alone.
    readers: list[JsonlGroupFile] = []
    source: InspectPoller | BatchConsumer | None = None
    if args.input:
        readers = [JsonlGroupFile(path) for path in args.input]
        for reader in readers:
            reader.problems = stats.problems
    else:
        client = ApiClient(args.api_url, resolve_api_key(args.api_key))
        try:
            source = _open_live_source(args, client)
        except BaseException:
            client.close()
            raise
        source.problems = stats.problems
    bar = tqdm(total=limit, unit="rec", desc=prog, file=sys.stderr, dynamic_ncols=True)
    try:
        with stop_on_signals() as stop:
            for reader in readers:
                for record in reader.read_new(final=True):
                    if reached() or stop.is_set():
                        break
                    handle(record)
            if source is not None:
                _poll_loop(args, source, handle, reached, stop, stats, bar)
    finally:
        bar.close()
        writer.close()
        if client is not None:
            client.close()
    return _finish(prog, args, stats, out_path)


def _poll_loop(
    args: argparse.Namespace,
    source: InspectPoller | BatchConsumer,
    handle: Callable[[GroupRecord], None],
    reached: Callable[[], bool],
    stop: threading.Event,
    stats: RunStats,
    bar: tqdm,
) -> None:
    last_new = time.monotonic()
    failing = False
    while not reached() and not stop.is_set():
        try:
            result: PollResult = source.poll()
            if failing:
                bar.write(f"{args.api_url} is answering again", file=sys.stderr)
            failing = False
        except (AuthRejected, TrainerNotRegistered):
            raise  # retrying cannot help
        except ToolError as exc:
            if not failing:
                bar.write(f"warning: {exc}; retrying", file=sys.stderr)
            failing = True
            result = PollResult([])
        if result.missed:
            stats.missed += result.missed
            bar.write(
                f"warning: {result.missed} groups left the API's inspection window unread "
                "(raise run-api --inspect-history or poll faster)",
                file=sys.stderr,
            )
        for record in result.records:
            # In --consume mode the whole batch is already taken from the trainer: keep all of it.
            if reached() and not isinstance(source, BatchConsumer):
                break
            handle(record)
        if isinstance(source, BatchConsumer):
            source.done()
        if result.records:
            last_new = time.monotonic()
        elif args.idle_timeout and time.monotonic() - last_new >= args.idle_timeout:
            bar.write(f"no new groups for {args.idle_timeout:g} s; stopping", file=sys.stderr)
            break
        if not result.records and not reached():
            stop.wait(args.poll_interval)


def _finish(prog: str, args: argparse.Namespace, stats: RunStats, out_path: Path) -> int:
    notes = stats.problems.summary("groups/lines")
    if notes:
        print(f"{prog}: {notes}", file=sys.stderr)
    if stats.records:
        print(
            f"{prog}: wrote {stats.records} records from {stats.groups} groups to {out_path}",
            file=sys.stderr,
        )
        return 0
    if args.save_messages and stats.groups and stats.skipped_no_messages == stats.groups:
        raise ToolError("no group carried messages, so --save-messages had nothing to write (drop the flag)")
    if not stats.groups:
        raise ToolError("no usable groups were read, nothing written")
    raise ToolError(
        f"none of the {stats.groups} groups passed the score filters, nothing written "
        "(see --allow-negative-scores / --minimum-score-diff-max-min)"
    )
