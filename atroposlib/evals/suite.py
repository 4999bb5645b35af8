"""Running a list of evaluations against one inference server, with one progress bar each and one table.

:func:`resolve_benchmarks` turns names into evaluation files: a suite name (:data:`SUITES`, e.g. ``core``),
a benchmark name (``mmlu`` -> ``mmlu_eval.py`` in the evaluations directory, ``arena_hard`` ->
``arena_hard_environment.py``) or a path to any environment file. :func:`load_env_class` imports a file and
finds its environment class. :func:`run_suite` runs them one after the other in one event loop: each is
configured exactly as ``python FILE evaluate`` would be (its ``config_init`` < the suite's ``--env.*`` /
``--openai.*`` flags, a flag applying to every benchmark whose config has the field), writes its
``metrics.json`` / ``samples.jsonl`` under ``OUT/<benchmark>/`` and, unless told to restart, reuses the items
an earlier, interrupted run already scored there (``--env.resume``). A benchmark that fails (no data, no
server) is a row with its error; the others still run.

:func:`write_table` writes ``results.md`` and ``results.json``: a row per benchmark, a column per metric.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from atroposlib.envs.data_loading import LOCAL_FORMATS
from atroposlib.evals.env import EvalEnv, Progress
from atroposlib.evals.report import headline

logger = logging.getLogger(__name__)

#: Named lists of benchmarks. ``core``: ten widely reported ones (knowledge, reasoning, math, instructions).
SUITES: dict[str, tuple[str, ...]] = {
    "core": (
        "mmlu", "mmlu_pro", "gpqa", "arc", "bbh", "hellaswag", "winogrande", "gsm8k", "math500", "ifeval",
    ),
    "mc": (
        "mmlu", "mmlu_pro", "gpqa", "agieval", "arc", "obqa", "bbh", "boolq", "hellaswag", "piqa", "siqa",
        "winogrande", "musr", "pubmedqa",
    ),
}  # fmt: skip
_FILE_SUFFIXES = ("_eval.py", "_environment.py", ".py")


class SuiteError(ValueError):
    """A suite that cannot start: an unknown benchmark name, a file without an environment class."""


def default_evals_dir() -> Path:
    """``environments/eval_environments`` of the working directory, else of the source tree atroposlib was
    installed from."""
    here = Path.cwd() / "environments" / "eval_environments"
    if here.is_dir():
        return here
    return Path(__file__).resolve().parents[2] / "environments" / "eval_environments"


def available_benchmarks(evals_dir: Path) -> list[str]:
    """The benchmark names of the evaluation files in ``evals_dir``."""
    names = set()
    for path in evals_dir.glob("*.py"):
        for suffix in _FILE_SUFFIXES[:2]:
            if path.name.endswith(suffix):
                names.add(path.name[: -len(suffix)])
    return sorted(names)


def resolve_benchmarks(names: Sequence[str], evals_dir: Path) -> list[tuple[str, Path]]:
    """``(benchmark name, file)`` for every name, suites expanded, in order, duplicates dropped.

    Raises :class:`SuiteError` for a name that is no suite, no benchmark in ``evals_dir`` and no file.
    """
    out: dict[str, Path] = {}
    for name in names:
        for entry in SUITES.get(name, (name,)):
            path = Path(entry)
            if entry.endswith(".py") and path.is_file():
                out.setdefault(path.stem.removesuffix("_eval").removesuffix("_environment"), path)
                continue
            found = next(
                (evals_dir / f"{entry}{s}" for s in _FILE_SUFFIXES if (evals_dir / f"{entry}{s}").is_file()),
                None,
            )
            if found is None:
                known = ", ".join([*SUITES, *available_benchmarks(evals_dir)])
                raise SuiteError(
                    f"unknown benchmark or suite {entry!r} (known: {known}; or give a file path)"
                )
            out.setdefault(entry, found)
    return list(out.items())


def load_env_class(path: Path) -> type:
    """The environment class an evaluation file defines (the one its ``__main__`` block runs: the last
    ``BaseEnv`` subclass defined in the file itself)."""
    from atroposlib.envs.base import BaseEnv

    module_name = f"atropos_eval_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise SuiteError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    classes = [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, BaseEnv) and obj.__module__ == module_name
    ]
    if not classes:
        raise SuiteError(f"{path}: defines no environment class")
    return classes[-1]


@dataclass
class BenchmarkResult:
    """One row of the suite's table."""

    name: str
    file: str
    metrics: dict[str, float] = field(default_factory=dict)
    error: Optional[str] = None
    seconds: float = 0.0
    reused_items: int = 0
    requests: int = 0

    @property
    def status(self) -> str:
        return "failed" if self.error else "ok"


def _flag_applies(flag: str, env_fields: set[str], server_namespace: Optional[str] = None) -> bool:
    namespace, _, key = flag.partition(".")
    if namespace in ("judge", "teacher"):  # an extra server: only for benchmarks that take one (judged ones)
        return namespace == server_namespace
    return namespace != "env" or key in env_fields


def local_data(data_dir: Optional[Path], name: str) -> Optional[Path]:
    """The local copy of a benchmark's data in ``data_dir``: ``<name>/`` (per-subset files) or
    ``<name>.jsonl`` (``.json``, ``.parquet``, ``.csv``), if there is one."""
    if data_dir is None:
        return None
    candidates = [data_dir / name, *(data_dir / f"{name}{s}" for s in LOCAL_FORMATS)]
    return next((c for c in candidates if c.exists()), None)


def command_args(
    env_cls: type, flags: dict[str, str], out_dir: Path, restart: bool, dataset_path: Optional[Path] = None
) -> list[str]:
    """The ``evaluate`` command line of one benchmark: the suite's flags that apply to it, its output
    directory, its local data (when given), resuming (unless ``restart``) and wandb off unless the flags
    turn it on."""
    config, _ = env_cls.config_init()
    fields = set(type(config).model_fields)
    values = {"env.data_dir_to_save_evals": str(out_dir), "env.use_wandb": "false"}
    if dataset_path is not None:
        values["env.dataset_path"] = str(dataset_path)
    if "resume" in fields:
        values["env.resume"] = "false" if restart else "true"
    extra = getattr(env_cls, "teacher_namespace", None)
    values.update({k: v for k, v in flags.items() if _flag_applies(k, fields, extra)})
    return ["evaluate", *(x for k, v in values.items() for x in (f"--{k}", v))]


async def run_benchmark(
    name: str,
    path: Path,
    flags: dict[str, str],
    out_dir: Path,
    restart: bool,
    progress: Callable[[int, str], Progress],
    data_dir: Optional[Path] = None,
    own_flags: Optional[dict[str, str]] = None,
) -> BenchmarkResult:
    """Configure, set up and evaluate one benchmark; failures are caught into the result. ``own_flags`` are
    this benchmark's alone: given last, so they win, and never filtered (an unknown field is an error)."""
    from atroposlib.envs.cli import parse_command
    from atroposlib.envs.cli.command import construct_env, write_evaluate_config

    result = BenchmarkResult(name, str(path))
    start = time.monotonic()
    try:
        env_cls = load_env_class(path)
        try:
            args = command_args(env_cls, flags, out_dir / name, restart, local_data(data_dir, name))
            args += [x for k, v in (own_flags or {}).items() for x in (f"--{k}", v)]
            command = parse_command(env_cls, args)
        except SystemExit as exc:  # argparse has printed why
            raise SuiteError(f"bad flags for {name} (exit {exc.code})") from None
        resolved = command.resolve()
        write_evaluate_config(resolved)
        env = construct_env(env_cls, resolved)
        if isinstance(env, EvalEnv):
            env.progress = progress
            env.print_summary = False
        else:  # an environment with its own evaluate(): one step when it is done
            bar = progress(1, name)
        await env._run_evaluate()
        if isinstance(env, EvalEnv):
            result.metrics = dict(headline(env.last_metrics, env.breakdowns))
            result.reused_items = env.reused_items
            result.requests = env.requests_sent
        else:
            bar.update(1)
            bar.close()
            report = json.loads((out_dir / name / "metrics.json").read_text(encoding="utf-8"))
            result.metrics = {k.removeprefix("eval/"): v for k, v in report["results"]["all"].items()}
    except Exception as exc:  # noqa: BLE001 - one benchmark's failure is a row of the table
        result.error = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
        logger.error("%s failed: %s", name, result.error)
    result.seconds = time.monotonic() - start
    return result


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4f}"
    return "" if value is None else str(value)


def table_columns(results: Sequence[BenchmarkResult]) -> list[str]:
    """The metric columns: every metric any row has, main metrics first, counts and rates last."""
    seen: dict[str, None] = {}
    for result in results:
        for key in result.metrics:
            seen.setdefault(key, None)
    tail = [k for k in seen if k.startswith(("num_", "no_answer", "truncated", "unscored", "failed_"))]
    return [k for k in seen if k not in tail] + tail


def write_table(results: Sequence[BenchmarkResult], out_dir: Path, model: str) -> tuple[Path, Path, str]:
    """Write ``results.md`` and ``results.json`` under ``out_dir``; returns both paths and the markdown."""
    columns = table_columns(results)
    header = ["benchmark", *columns, "reused items", "status", "seconds"]
    lines = [f"| {' | '.join(header)} |", f"|{'|'.join('---' for _ in header)}|"]
    for r in results:
        cells = [
            r.name,
            *(_cell(r.metrics.get(c)) for c in columns),
            str(r.reused_items),
            r.status if not r.error else f"failed: {r.error}",
            f"{r.seconds:.1f}",
        ]
        lines.append(f"| {' | '.join(c.replace('|', '/') for c in cells)} |")
    markdown = f"# Evaluation results: {model}\n\n" + "\n".join(lines) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    md_path, json_path = out_dir / "results.md", out_dir / "results.json"
    md_path.write_text(markdown, encoding="utf-8")
    doc = {
        "model": model,
        "columns": columns,
        "rows": [
            {"benchmark": r.name, "file": r.file, "status": r.status, "error": r.error, "seconds": r.seconds,
             "reused_items": r.reused_items, "requests": r.requests, "metrics": r.metrics}
            for r in results
        ],
    }  # fmt: skip
    json_path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return md_path, json_path, markdown


async def run_suite(
    benchmarks: Sequence[tuple[str, Path]],
    flags: dict[str, str],
    out_dir: Path,
    restart: bool = False,
    progress_factory: Optional[Callable[[str], Callable[[int, str], Progress]]] = None,
    data_dir: Optional[Path] = None,
    own_flags: Optional[dict[str, dict[str, str]]] = None,
) -> list[BenchmarkResult]:
    """Run ``benchmarks`` one after the other (see the module docstring). ``progress_factory(name)`` gives
    the progress callback of one benchmark (default: a tqdm bar each); ``data_dir`` holds local copies of
    their data (:func:`local_data`); ``own_flags[name]`` are flags for benchmark ``name`` alone."""
    from atroposlib.evals.env import tqdm_progress

    results: list[BenchmarkResult] = []
    server_down = False
    for name, path in benchmarks:
        if server_down:  # every further benchmark would wait out the same timeout
            results.append(
                BenchmarkResult(name, str(path), error="not run: the inference server is unavailable")
            )
            continue
        progress = progress_factory(name) if progress_factory else tqdm_progress
        own = (own_flags or {}).get(name)
        result = await run_benchmark(name, path, flags, out_dir, restart, progress, data_dir, own)
        server_down = bool(result.error and "ServerUnavailableError" in result.error)
        results.append(result)
    return results


__all__ = [
    "SUITES",
    "BenchmarkResult",
    "SuiteError",
    "available_benchmarks",
    "command_args",
    "default_evals_dir",
    "load_env_class",
    "local_data",
    "resolve_benchmarks",
    "run_suite",
    "write_table",
]
