"""``atropos-eval``: run a suite of evaluations against one inference server and write one table.

::

    atropos-eval core --base-url http://localhost:9000/v1 --model NousResearch/Hermes-3-Llama-3.1-8B
    atropos-eval mmlu gpqa environments/eval_environments/bbh_eval.py --env.eval_limit 200 --output-dir out
    atropos-eval --list

Names are suites (``core``: about ten widely reported benchmarks; ``mc``: every multiple-choice one),
benchmarks of ``environments/eval_environments`` (``mmlu`` runs ``mmlu_eval.py``) or paths to evaluation files.
Each benchmark runs as ``python FILE evaluate`` would, with the suite's ``--env.FIELD VALUE`` flags applied to
every benchmark whose config has the field, ``--BENCHMARK.FIELD VALUE`` (``--arc.subset ARC-Easy``) to that
benchmark alone and ``--openai.FIELD VALUE`` to all (``--data-dir`` gives each benchmark its local data file or
directory by name); its ``metrics.json`` and
``samples.jsonl`` go to ``OUTPUT_DIR/<benchmark>/``. One progress bar per benchmark is shown; at the end
``OUTPUT_DIR/results.md`` and ``results.json`` hold a row per benchmark and a column per metric.

Running the same command again after an interruption reuses every item already scored in ``OUTPUT_DIR``
(same prompt, sampling settings and model) and asks the model only for the rest; ``--restart`` starts over.
Exit status: 0 when every benchmark ran, 1 when one failed (its row says why), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from atroposlib.cli._tooling.errors import ToolError, run_cli

PROG = "atropos-eval"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run a suite of evaluations against one OpenAI-compatible server and write one table.",
        epilog="Further --env.FIELD VALUE flags go to every benchmark whose config has FIELD (e.g. "
        "--env.eval_limit 100, --env.thinking_mode false), --BENCHMARK.FIELD VALUE to that benchmark alone "
        "(--arc.subset ARC-Easy), --openai.FIELD VALUE flags to the server config, --judge.FIELD VALUE to the "
        "judge of the judged benchmarks.",
    )
    parser.add_argument("benchmarks", nargs="*", help="suite names (core, mc), benchmark names or eval files")
    parser.add_argument(
        "--base-url", default="http://localhost:9000/v1", help="inference server (/v1 is added)"
    )
    parser.add_argument("--model", default=None, help="served model (default: the first the server lists)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY") or "none",
        help="API key (default: $OPENAI_API_KEY)",
    )
    parser.add_argument(
        "--output-dir", default=None, help="results directory (default: eval_results/<model>)"
    )
    parser.add_argument("--evals-dir", default=None, help="where benchmark names are looked up")
    parser.add_argument(
        "--data-dir",
        default=None,
        help="local data: DIR/<benchmark>.jsonl (or .json/.parquet/.csv) or DIR/<benchmark>/ per-subset files, "
        "used instead of the hub for the benchmarks that have one",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="evaluate the first N items of each benchmark"
    )
    parser.add_argument("--max-concurrency", type=int, default=None, help="items in flight per benchmark")
    parser.add_argument("--restart", action="store_true", help="ignore items scored by an earlier run")
    parser.add_argument("--list", action="store_true", help="list suites and benchmarks, then exit")
    return parser


SERVER_NAMESPACES = ("env", "openai", "judge")


def split_flags(
    extra: Sequence[str], benchmarks: Sequence[str] = ()
) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The extra flags: ``--env.FIELD VALUE`` / ``--openai.FIELD=VALUE`` / ``--judge.FIELD VALUE`` as
    ``{"env.FIELD": VALUE}`` for every benchmark, and ``--BENCHMARK.FIELD VALUE`` (``--arc.subset ARC-Easy``) as
    ``{BENCHMARK: {"env.FIELD": VALUE}}`` for that benchmark alone.

    Raises :class:`ToolError` (exit 2) for anything else, a prefix that names none of ``benchmarks``
    included.
    """
    common: dict[str, str] = {}
    own: dict[str, dict[str, str]] = {}
    items = list(extra)
    while items:
        token = items.pop(0)
        match = re.fullmatch(r"--([A-Za-z0-9_-]+)\.([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?", token, re.DOTALL)
        if match is None:
            raise ToolError(
                f"unrecognized argument {token!r} (flags are --env.FIELD VALUE, --openai.FIELD VALUE, "
                "--BENCHMARK.FIELD VALUE or, for the judged benchmarks, --judge.FIELD VALUE)",
                2,
            )
        prefix, field, value = match.groups()
        if value is None:
            if not items:
                raise ToolError(f"{token} needs a value", 2)
            value = items.pop(0)
        if prefix in SERVER_NAMESPACES:
            common[f"{prefix}.{field}"] = value
        elif prefix in benchmarks:
            own.setdefault(prefix, {})[f"env.{field}"] = value
        else:
            raise ToolError(f"{token}: {prefix!r} is none of the benchmarks run ({', '.join(benchmarks)})", 2)
    return common, own


def _progress_display() -> Any:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("{task.description:<16}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(), transient=False,
    )  # fmt: skip


class _Bar:
    """One benchmark's bar on the shared display (the eval core's ``Progress``)."""

    def __init__(self, display: Any, task: Any, total: int):
        self.display, self.task = display, task
        display.update(task, total=total)

    def update(self, n: int = 1) -> None:
        self.display.advance(self.task, n)

    def close(self) -> None:
        self.display.refresh()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)

    def body() -> int:
        from atroposlib.envs.eval import discover_model_name, normalize_base_url
        from atroposlib.evals.suite import (
            SUITES,
            SuiteError,
            available_benchmarks,
            default_evals_dir,
            resolve_benchmarks,
            run_suite,
            write_table,
        )

        evals_dir = Path(args.evals_dir) if args.evals_dir else default_evals_dir()
        if args.list:
            for name, members in SUITES.items():
                print(f"suite {name}: {' '.join(members)}")
            print(f"benchmarks ({evals_dir}): {' '.join(available_benchmarks(evals_dir))}")
            return 0
        if not args.benchmarks:
            raise ToolError(
                "name at least one suite, benchmark or eval file (atropos-eval --list shows them)", 2
            )
        try:
            benchmarks = resolve_benchmarks(args.benchmarks, evals_dir)
        except SuiteError as exc:
            raise ToolError(str(exc), 2) from None
        flags, own_flags = split_flags(extra, [name for name, _ in benchmarks])
        base_url = normalize_base_url(args.base_url)
        model = args.model
        if not model:
            try:
                model = discover_model_name(base_url, args.api_key)
            except RuntimeError as exc:
                raise ToolError(f"{exc} (or pass --model)") from None
        flags = {
            "openai.base_url": base_url,
            "openai.model_name": model,
            "openai.api_key": args.api_key,
            **flags,
        }
        if args.limit is not None:
            flags["env.eval_limit"] = str(args.limit)
        if args.max_concurrency is not None:
            flags["env.max_eval_workers"] = str(args.max_concurrency)
        out_dir = Path(args.output_dir or Path("eval_results") / re.sub(r"[^0-9A-Za-z._-]+", "_", model))
        display = _progress_display()
        tasks = {name: display.add_task(name, total=None) for name, _ in benchmarks}

        def progress_for(name: str):
            return lambda total, _description: _Bar(display, tasks[name], total)

        with display:
            data_dir = Path(args.data_dir) if args.data_dir else None
            results = asyncio.run(
                run_suite(benchmarks, flags, out_dir, args.restart, progress_for, data_dir, own_flags)
            )
        md_path, json_path, markdown = write_table(results, out_dir, model)
        print(markdown)
        print(f"{PROG}: wrote {md_path} and {json_path}")
        return 1 if any(r.error for r in results) else 0

    return run_cli(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
