"""Where each core's time goes in the demo: sample every process with py-spy and sum the samples by part.

    python benchmarks/profile_demo.py [--steps 30] [--rate 20] [--raw FILE]

Runs ``python -m example_trainer.demo --steps N`` under ``py-spy record --subprocesses --format raw``
(py-spy from PyPI: ``pip install py-spy``) and prints, for every process (run-api, the environment, the
trainer, vLLM's API server, its engine core and its worker), the CPU seconds sampled and their split into
parts (vLLM's scheduler and model, HTTP and JSON, tokenisation, the trainer's forward, backward, optimizer
and weight refresh, ...). Idle threads are not sampled, so the numbers are CPU time, not wall time.
``--raw FILE`` summarises an existing py-spy raw file instead of running the demo.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

#: (part, substrings of a frame) in priority order: a stack is charged to the first part one of whose
#: substrings occurs in any of its frames, searched from the innermost frame outwards.
PARTS: list[tuple[str, tuple[str, ...]]] = [
    ("imports", ("_find_and_load", "<frozen importlib", "importlib/")),
    (
        "vLLM shm queue spin-wait",
        ("MessageQueue.acquire_read", "SpinCondition.wait", "MessageQueue.acquire_write"),
    ),
    (
        "vLLM start-up",
        (
            "initialize_kv_cache",
            "BaseModelLoader.load_model",
            "determine_available_memory",
            "compile_or_warm",
        ),
    ),
    ("weight refresh", ("weight_refresh", "load_weights", "save_pretrained", "safetensors")),
    ("backward", ("backward (torch/", "_engine_run_backward", "autograd/__init__")),
    ("optimizer step", ("optim/adamw", "optim/optimizer", "clip_grad_norm")),
    ("GRPO loss", ("compute_grpo_loss", "example_trainer/grpo/loss.py")),
    ("vLLM scheduler", ("v1/core/sched", "kv_cache_manager", "block_pool", "Scheduler.")),
    ("vLLM sampler", ("v1/sample",)),
    (
        "model forward",
        ("modeling_", "model_executor/models", "torch/nn/modules", "onednn_mm", "execute_model"),
    ),
    ("tokenisation / detokenisation", ("tokenizers", "tokenization_", "detokeniz", "apply_chat_template")),
    ("JSON / pydantic", ("json/", "orjson", "pydantic", "msgspec", "serialization")),
    (
        "HTTP",
        ("uvicorn", "starlette", "fastapi", "h11", "httpx", "httpcore", "aiohttp", "requests/", "urllib3"),
    ),
    ("env scoring / groups", ("environments/", "atroposlib/envs")),
    ("API batching / store", ("atroposlib/api",)),
    ("asyncio / selectors", ("asyncio/", "selectors.py", "uvloop")),
]
PROCESS_NAMES = [
    ("VLLM::Worker", "vLLM worker"),
    ("VLLM::EngineCore", "vLLM engine core"),
    ("vllm_api_server", "vLLM API server"),
    ("arithmetic_server", "environment"),
    ("run_api", "run-api"),
    ("example_trainer.grpo", "trainer"),
    ("example_trainer.demo", "demo (warm start, evals)"),
    ("multiprocessing.spawn", "vLLM engine core / worker (spawned)"),
]
_PROCESS = re.compile(r'^process (\d+):"(.*)"$')


def process_label(frame: str) -> str:
    """The process a py-spy root frame (``process PID:"cmdline"``) belongs to, by its command line."""
    match = _PROCESS.match(frame)
    cmdline = match.group(2) if match else frame
    for needle, name in PROCESS_NAMES:
        if needle in cmdline:
            return name
    return "other"


def stack_part(frames: list[str]) -> str:
    """The part a stack is charged to (see :data:`PARTS`); ``"other"`` when none matches."""
    for part, needles in PARTS:
        for frame in reversed(frames):
            if any(n in frame for n in needles):
                return part
    return "other"


def summarise(raw: Path, rate: float) -> dict[str, dict[str, float]]:
    """CPU seconds per process and part from a py-spy raw file sampled at ``rate`` Hz."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        # With --subprocesses a child's stack starts with its ancestors' process frames: the last one names it.
        roots = [i for i, f in enumerate(frames) if f.startswith("process ")]
        proc = process_label(frames[roots[-1]]) if roots else "demo (warm start, evals)"
        out[proc][stack_part(frames[roots[-1] + 1 :] if roots else frames)] += int(count) / rate
    return out


def print_summary(summary: dict[str, dict[str, float]]) -> None:
    total = sum(sum(parts.values()) for parts in summary.values())
    print(f"CPU seconds sampled: {total:.1f}")
    for proc, parts in sorted(summary.items(), key=lambda kv: -sum(kv[1].values())):
        proc_total = sum(parts.values())
        print(f"\n{proc}: {proc_total:.1f} s ({100 * proc_total / max(total, 1e-9):.0f}% of all)")
        for part, secs in sorted(parts.items(), key=lambda kv: -kv[1]):
            if secs >= 0.005 * proc_total:
                print(f"  {part:32s} {secs:8.1f} s  {100 * secs / proc_total:5.1f}%")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="GRPO steps of the profiled demo")
    parser.add_argument("--rate", type=float, default=20.0, help="samples per second per process")
    parser.add_argument("--raw", type=Path, help="summarise this py-spy raw file instead of running")
    args = parser.parse_args(argv)
    raw = args.raw
    if raw is None:
        workdir = Path(tempfile.mkdtemp(prefix="profile-demo-"))
        raw = workdir / "demo.raw"
        cmd = [
            "py-spy", "record", "--subprocesses", "--nonblocking", "--rate", str(args.rate),
            "--format", "raw", "-o", str(raw), "--",
            sys.executable, "-m", "example_trainer.demo", "--steps", str(args.steps),
            "--run-dir", str(workdir / "run"),
        ]  # fmt: skip
        code = subprocess.call(cmd)
        if code != 0 or not raw.exists():
            print(f"profile_demo: the profiled demo exited with {code}", file=sys.stderr)
            return 1
        print(f"raw profile: {raw}; demo run: {workdir / 'run'}")
    print_summary(summarise(raw, args.rate))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
