"""Held-out accuracy per wall-clock second: the demo's whole loop vs TRL's ``GRPOTrainer``, side by side.

Both train the demo's warm-started tiny model (the same cached checkpoint) on the demo's task (1-2 digit
addition) with the same GRPO settings: 32 problems x 8 rollouts per optimizer step, learning rate 1e-4,
clip 0.2, at most 8 new tokens, temperature 1, no KL term, AdamW (weight decay 0.01, torch's default),
gradient clipping at 1.0, per-sequence token-mean loss (TRL ``loss_type="grpo"``).

* ours: the demo's pipeline (``run-api``, the trainer ``python -m example_trainer.grpo`` with its inference
  server, the arithmetic environment in ``serve`` mode), each its own process;
* TRL: one ``GRPOTrainer`` process generating with Hugging Face ``generate`` (``--trl-threads`` torch
  threads, default: every core).

Each run trains for ``--duration`` seconds of training time (ours: from the moment the inference server
is healthy; TRL: from the start of ``train()``; start-up is printed separately). Every ``--eval-every``
seconds the newest weights are set aside (ours: the trainer's checkpoint of its latest step; TRL: an
in-memory copy), and only after both runs are they evaluated, with the demo's own code
(:func:`example_trainer.demo.heldout_eval.evaluate_heldout`, greedy, the same 500 held-out problems), so
evaluation never takes training time (accuracy at a given time is interpolated between the snapshots
around it). The two alternate for ``--repeats`` rounds; printed are steps/min,
sequences/s, the training time each needs to reach each accuracy level (``--levels``, or by default the
warm start's accuracy plus each of ``--gains``, since the warm start's accuracy differs between machines)
and the accuracy each has
at equal times, with the ratios ours / TRL (medians over the rounds).

    pip install trl   # not a dependency of the package
    python benchmarks/e2e_vs_trl.py [--duration 150] [--repeats 3] [--eval-every 10] [--backend hf|vllm]
    python benchmarks/e2e_vs_trl.py --quick   # one round of 30 s per side (~2 minutes with a cached warm start)

Exit status: 0 after printing the results, 2 when trl is not installed or the flags are wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
warnings.filterwarnings("ignore")

PROG = "benchmarks/e2e_vs_trl.py"
DEFAULT_GAINS = (0.05, 0.10, 0.15, 0.20, 0.25, 0.30)


@dataclass
class Snapshot:
    """Weights set aside at ``t`` seconds of training (after ``step`` optimizer steps)."""

    t: float
    step: int
    path: str
    accuracy: float | None = None


@dataclass
class RunResult:
    """One side's run: throughput, start-up and the evaluated snapshots."""

    side: str
    round: int
    train_s: float
    steps: int
    sequences_generated: int
    sequences_trained: int
    startup_s: float
    snapshots: list[Snapshot] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def steps_per_min(self) -> float:
        return 60.0 * self.steps / self.train_s if self.train_s else 0.0

    @property
    def generated_per_s(self) -> float:
        return self.sequences_generated / self.train_s if self.train_s else 0.0

    @property
    def trained_per_s(self) -> float:
        return self.sequences_trained / self.train_s if self.train_s else 0.0

    def time_to(self, level: float) -> float | None:
        """Training seconds of the first snapshot whose accuracy reaches ``level`` (None: never)."""
        for snap in self.snapshots:
            if snap.accuracy is not None and snap.accuracy >= level - 1e-9:
                return snap.t
        return None

    def accuracy_at(self, t: float) -> float | None:
        """Accuracy at ``t`` seconds, interpolated linearly between the snapshots around it (the last
        snapshot's accuracy after it)."""
        points = [(s.t, s.accuracy) for s in self.snapshots if s.accuracy is not None]
        if not points:
            return None
        if t >= points[-1][0]:
            return points[-1][1]
        for (t0, a0), (t1, a1) in zip(points, points[1:], strict=False):
            if t0 <= t <= t1:
                return a0 if t1 == t0 else a0 + (a1 - a0) * (t - t0) / (t1 - t0)
        return points[0][1]


# ---------------------------------------------------------------------------------------------------------
# the shared pieces: settings, warm start, evaluation
# ---------------------------------------------------------------------------------------------------------
def demo_config(args: argparse.Namespace, run_dir: Path | None = None, steps: int = 100_000) -> Any:
    from example_trainer.demo.config import DemoConfig

    values: dict[str, Any] = {
        "steps": steps,
        "eval_size": args.eval_size,
        "seed": args.seed,
        "inference_backend": args.backend,
        "inference_threads": args.inference_threads,
        "timeout": args.duration + 900,
        "keep_checkpoints": True,
    }
    for name in ("sft_steps", "env_workers", "max_batches_offpolicy"):
        if getattr(args, name) is not None:
            values[name] = getattr(args, name)
    if args.cache_dir is not None:
        values["cache_dir"] = args.cache_dir
    values.update(getattr(args, "demo_overrides", None) or {})  # e.g. benchmarks/loss_types.py's loss flags
    if run_dir is not None:
        values["run_dir"] = str(run_dir)
    return DemoConfig(**values)


def warm_checkpoint(args: argparse.Namespace) -> Path:
    """The demo's warm-started model (trained once, then from the demo's cache)."""
    from atroposlib.testing.tiny_model import build_tiny_model
    from example_trainer.demo.sft_warmstart import warm_start

    cfg = demo_config(args)
    settings = cfg.sft_settings()
    model_dir, cached = warm_start(
        build_tiny_model(), cfg.task_settings(), settings, cfg.resolved_cache_dir()
    )
    print(f"warm start {'from the cache' if cached else 'trained'}: {model_dir}", flush=True)
    return Path(model_dir)


def task_for(args: argparse.Namespace) -> Any:
    from environments.arithmetic_server import ArithmeticTask

    return ArithmeticTask(**demo_config(args).task_settings())


def evaluate_snapshots(results: list[RunResult], args: argparse.Namespace, warm: Path) -> None:
    """Held-out accuracy of every snapshot, with the demo's evaluation (greedy, the same problems)."""
    import torch

    from example_trainer.demo.heldout_eval import evaluate_heldout, load_causal_lm

    torch.set_num_threads(os.cpu_count() or 1)
    task = task_for(args)
    model, tokenizer = load_causal_lm(warm)
    base = evaluate_heldout(model, tokenizer, task, max_new_tokens=8).accuracy
    print(f"held-out accuracy of the warm start: {base:.3f}", flush=True)
    for result in results:
        for snap in result.snapshots:
            if snap.path == "<warm>":
                snap.accuracy = base
                continue
            state = torch.load(snap.path, weights_only=True) if snap.path.endswith(".pt") else None
            if state is None:
                from safetensors.torch import load_file

                state = {}
                for file in sorted(Path(snap.path).glob("*.safetensors")):
                    state.update(load_file(str(file)))
            model.load_state_dict(state, strict=False)
            snap.accuracy = evaluate_heldout(model, tokenizer, task, max_new_tokens=8).accuracy


# ---------------------------------------------------------------------------------------------------------
# ours: the demo's pipeline
# ---------------------------------------------------------------------------------------------------------
class _NoProgress:
    """Stands in for the demo's rich progress display."""

    def add_task(self, *a: Any, **k: Any) -> int:
        return 0

    def update(self, *a: Any, **k: Any) -> None:
        return None

    def remove_task(self, *a: Any, **k: Any) -> None:
        return None


def run_ours(args: argparse.Namespace, warm: Path, work: Path, rnd: int) -> RunResult:
    from rich.console import Console

    from example_trainer.demo.pipeline import Demo
    from example_trainer.demo.reporting import read_new_records as _read_new_records
    from example_trainer.demo.reporting import read_rollout_stats as _read_rollout_stats

    run_dir = work / f"ours-{rnd}"
    demo = Demo(demo_config(args, run_dir), Console(stderr=True, highlight=False, quiet=True))
    snaps_dir = work / f"ours-{rnd}-snapshots"
    snaps_dir.mkdir(parents=True, exist_ok=True)
    snapshots = [Snapshot(0.0, 0, "<warm>")]
    metrics_path = demo.ckpt_dir / "metrics.jsonl"
    offset, env_offset = 0, 0
    step_times: dict[int, float] = {}
    rollout_stats: list[dict[str, Any]] = []
    launched = time.monotonic()
    try:
        demo.start_services(warm)
        demo.wait_for_vllm(_NoProgress(), launched)
        t0_wall, t0 = time.time(), time.monotonic()
        startup = t0 - launched
        next_point = args.eval_every
        while True:
            time.sleep(0.2)
            demo._check_services()
            offset, records = _read_new_records(metrics_path, offset)
            for rec in records:
                if "train/kept_reward_mean" in rec and "time" in rec:
                    step_times[int(rec["step"])] = float(rec["time"]) - t0_wall
            env_offset, stats = _read_rollout_stats(demo.logs / "environment.log", env_offset)
            rollout_stats.extend(stats)
            elapsed = time.monotonic() - t0
            if elapsed >= next_point or elapsed >= args.duration:
                done = [
                    s for s in step_times if s > snapshots[-1].step and (demo.ckpt_dir / f"step_{s}").is_dir()
                ]
                if done:
                    newest = max(done)
                    target = snaps_dir / f"step_{newest}"
                    shutil.copytree(
                        demo.ckpt_dir / f"step_{newest}",
                        target,
                        ignore=shutil.ignore_patterns("*.pt", "training_*"),
                    )
                    snapshots.append(Snapshot(step_times[newest], newest, str(target)))
                next_point += args.eval_every
            # The trainer keeps every checkpoint here (keep_checkpoints): drop the ones no longer needed.
            newest_step = max(step_times, default=0)
            for path in demo.ckpt_dir.glob("step_*"):
                suffix = path.name.removeprefix("step_")
                if suffix.isdigit() and int(suffix) < newest_step - 2:
                    shutil.rmtree(path, ignore_errors=True)
            if elapsed >= args.duration:
                break
        train_s = time.monotonic() - t0
    finally:
        demo.stop_services()
    steps = max((s for s, t in step_times.items() if t <= train_s), default=0)
    groups = sum(int(r.get("train/groups_scored", 0)) for r in rollout_stats)
    dropped = sum(int(r.get("train/groups_dropped_equal_scores", 0)) for r in rollout_stats)
    cfg = demo.config
    return RunResult(
        side="ours",
        round=rnd,
        train_s=train_s,
        steps=steps,
        sequences_generated=groups * cfg.group_size,
        sequences_trained=steps * cfg.batch_size,
        startup_s=startup,
        snapshots=snapshots,
        extra={"groups_scored": groups, "groups_dropped_equal_scores": dropped, "backend": args.backend},
    )


# ---------------------------------------------------------------------------------------------------------
# TRL: one GRPOTrainer process
# ---------------------------------------------------------------------------------------------------------
def run_trl(args: argparse.Namespace, warm: Path, work: Path, rnd: int) -> RunResult:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from environments.arithmetic_server import score_completion
    from example_trainer.demo.heldout_eval import load_causal_lm

    torch.set_num_threads(args.trl_threads)
    task = task_for(args)
    n_prompts = int(args.duration * 8 * 32) + 4096  # more than any run can use
    problems = [task.train_problem(i) for i in range(n_prompts)]
    dataset = Dataset.from_dict(
        {"prompt": [task.prompt_messages(p) for p in problems], "answer": [p.answer for p in problems]}
    )

    def reward(completions: list[Any], answer: list[int], **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [score_completion(t, a) for t, a in zip(texts, answer, strict=True)]

    start_build = time.monotonic()
    model, tokenizer = load_causal_lm(warm)
    out_dir = work / f"trl-{rnd}"
    config = GRPOConfig(
        output_dir=str(out_dir),
        per_device_train_batch_size=256,
        gradient_accumulation_steps=1,
        num_generations=8,
        max_completion_length=8,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.01,
        max_grad_norm=1.0,
        optim="adamw_torch",
        epsilon=0.2,
        beta=0.0,
        loss_type="grpo",
        gradient_checkpointing=False,  # TRL's default is on; it only costs time on a small model
        num_iterations=1,
        max_steps=100_000,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1_000_000,
        disable_tqdm=True,
        seed=args.seed + rnd,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=config, train_dataset=dataset, processing_class=tokenizer
    )
    startup = time.monotonic() - start_build
    snapshots = [Snapshot(0.0, 0, "<warm>")]
    snaps_dir = work / f"trl-{rnd}-snapshots"
    snaps_dir.mkdir(parents=True, exist_ok=True)
    kept: list[tuple[float, int, dict[str, Any]]] = []
    clock: dict[str, float] = {}

    class Clock(TrainerCallback):
        def on_train_begin(self, *a: Any, **k: Any) -> None:
            clock["t0"] = time.monotonic()
            clock["next"] = args.eval_every

        def on_step_end(self, _args: Any, state: Any, control: Any, **k: Any) -> None:
            elapsed = time.monotonic() - clock["t0"]
            clock["last"] = elapsed
            clock["steps"] = state.global_step
            if elapsed >= clock["next"] or elapsed >= args.duration:
                # A copy in memory (a few MB for the tiny model); written to disk after training.
                weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
                kept.append((elapsed, state.global_step, weights))
                while clock["next"] <= elapsed:
                    clock["next"] += args.eval_every
            if elapsed >= args.duration:
                control.should_training_stop = True

    trainer.add_callback(Clock())
    trainer.train()
    train_s = clock.get("last", 0.0)
    for t, step, weights in kept:
        path = snaps_dir / f"step_{step}.pt"
        torch.save(weights, path)
        snapshots.append(Snapshot(t, step, str(path)))
    steps = int(clock.get("steps", 0))
    shutil.rmtree(out_dir, ignore_errors=True)
    return RunResult(
        side="trl",
        round=rnd,
        train_s=train_s,
        steps=steps,
        sequences_generated=steps * 256,
        sequences_trained=steps * 256,
        startup_s=startup,
        snapshots=snapshots,
        extra={"trl_threads": args.trl_threads},
    )


# ---------------------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------------------
def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "never" if value is None else format(value, spec)


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}"


def _median_time(results: list[RunResult], level: float) -> float | None:
    """Median over rounds of the time to ``level``; a round that never reaches it counts as +inf
    (the median is "never" when half the rounds or more never get there)."""
    times = sorted((r.time_to(level) for r in results), key=lambda v: float("inf") if v is None else v)
    if not times:
        return None
    n = len(times)
    if n % 2:
        return times[n // 2]
    lo, hi = times[n // 2 - 1], times[n // 2]
    return None if lo is None or hi is None else (lo + hi) / 2


def summarize(results: list[RunResult], args: argparse.Namespace) -> dict[str, Any]:
    """Median figures per side and the ratios ours / TRL; printed as a table."""
    ours = [r for r in results if r.side == "ours"]
    trl = [r for r in results if r.side == "trl"]
    out: dict[str, Any] = {"rounds": len(ours), "duration_s": args.duration, "backend": args.backend}
    rows = []

    def row(name: str, a: float | None, b: float | None, spec: str = ".1f") -> None:
        rows.append((name, _fmt(a, spec), _fmt(b, spec), _ratio(a, b)))
        out[name] = {"ours": a, "trl": b}

    row("steps/min", _median([r.steps_per_min for r in ours]), _median([r.steps_per_min for r in trl]))
    row(
        "sequences generated/s",
        _median([r.generated_per_s for r in ours]),
        _median([r.generated_per_s for r in trl]),
    )
    row(
        "sequences trained/s",
        _median([r.trained_per_s for r in ours]),
        _median([r.trained_per_s for r in trl]),
    )
    row(
        "start-up s (not in the times)",
        _median([r.startup_s for r in ours]),
        _median([r.startup_s for r in trl]),
    )
    levels = args.levels
    if levels is None:
        warm = next((s.accuracy for r in results for s in r.snapshots if s.path == "<warm>"), 0.0) or 0.0
        levels = [round(warm + gain, 3) for gain in args.gains]
    out["levels"] = levels
    for level in levels:
        row(f"s to accuracy {level:.3f}", _median_time(ours, level), _median_time(trl, level))
    points = [args.eval_every * k for k in range(1, int(args.duration // args.eval_every) + 1)]

    def mean_accuracy(run: RunResult) -> float | None:
        values = [run.accuracy_at(t) for t in points]
        return statistics.fmean(values) if values and None not in values else None

    row("mean accuracy over the run", _median([mean_accuracy(r) for r in ours]),
        _median([mean_accuracy(r) for r in trl]), ".3f")  # fmt: skip
    for t in points:
        row(
            f"accuracy at {t:.0f} s",
            _median([r.accuracy_at(t) for r in ours]),
            _median([r.accuracy_at(t) for r in trl]),
            ".3f",
        )
    width = max(len(r[0]) for r in rows)
    print(
        f"\nmedians over {len(ours)} round(s), {args.duration:.0f} s of training each, ours with the "
        f"{args.backend} backend; ratio = ours / TRL (times: < 1 is better for ours)"
    )
    print(f"{'':{width}}  {'ours':>8}  {'TRL':>8}  {'ratio':>6}")
    for name, a, b, r in rows:
        print(f"{name:{width}}  {a:>8}  {b:>8}  {r:>6}")
    for r in results:
        accs = ", ".join(f"{s.t:.0f}s:{s.accuracy:.3f}" for s in r.snapshots if s.accuracy is not None)
        print(f"round {r.round} {r.side}: {r.steps} steps in {r.train_s:.0f} s; {accs}")
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=150.0, help="training seconds per run")
    parser.add_argument("--repeats", type=int, default=1, help="rounds (ours then TRL each round)")
    parser.add_argument("--eval-every", type=float, default=10.0, help="seconds between snapshots")
    parser.add_argument("--levels", type=float, nargs="+", default=None, help="accuracy levels to time")
    parser.add_argument(
        "--gains", type=float, nargs="+", default=list(DEFAULT_GAINS),
        help="without --levels: time the warm start's accuracy plus each of these",
    )  # fmt: skip
    parser.add_argument("--backend", choices=["hf", "vllm"], default="hf", help="our inference server")
    parser.add_argument("--inference-threads", type=int, default=1, help="torch threads of our hf server")
    parser.add_argument("--env-workers", type=int, default=None, help="the demo's --env-workers")
    parser.add_argument(
        "--max-batches-offpolicy", type=int, default=None, help="the demo's --max-batches-offpolicy"
    )
    parser.add_argument("--trl-threads", type=int, default=os.cpu_count() or 1, help="TRL's torch threads")
    parser.add_argument("--eval-size", type=int, default=500, help="held-out problems")
    parser.add_argument("--sft-steps", type=int, default=None, help="warm-start steps (default: the demo's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=["ours", "trl"], default=None, help="run one side only")
    parser.add_argument("--work-dir", default=None, help="keep runs here (default: a temporary directory)")
    parser.add_argument("--json", default=None, help="write every figure to this file")
    parser.add_argument("--cache-dir", default=None, help="warm-start cache (default: the demo's)")
    parser.add_argument("--quick", action="store_true", help="smoke run: one round of 30 s per side")
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.eval_every, args.repeats = 30.0, 10.0, 1
    for name in ("duration", "eval_every"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    if args.repeats < 1 or args.eval_size < 1 or args.trl_threads < 1 or args.inference_threads < 1:
        parser.error("--repeats, --eval-size, --trl-threads and --inference-threads must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.only != "ours":
        try:
            import trl  # noqa: F401
        except ImportError:
            print(
                f"{PROG}: TRL is not installed (pip install trl); it is the other side of this benchmark",
                file=sys.stderr,
            )
            return 2
    import torch

    torch.set_num_threads(1)
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="e2e-vs-trl-"))
    work.mkdir(parents=True, exist_ok=True)
    warm = warm_checkpoint(args)
    results: list[RunResult] = []
    try:
        for rnd in range(args.repeats):
            if args.only != "trl":
                print(f"round {rnd}: ours ({args.backend}) for {args.duration:.0f} s ...", flush=True)
                results.append(run_ours(args, warm, work, rnd))
            if args.only != "ours":
                print(f"round {rnd}: TRL for {args.duration:.0f} s ...", flush=True)
                results.append(run_trl(args, warm, work, rnd))
                torch.set_num_threads(1)
        print("evaluating the snapshots ...", flush=True)
        evaluate_snapshots(results, args, warm)
        summary = summarize(results, args)
        if args.json:
            payload = {"summary": summary, "runs": [
                {**asdict(r), "steps_per_min": r.steps_per_min, "generated_per_s": r.generated_per_s}
                for r in results]}  # fmt: skip
            Path(args.json).write_text(json.dumps(payload, indent=2))
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
