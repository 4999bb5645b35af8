"""Time to held-out accuracy levels on the demo, per loss type, side by side in one run.

Each loss type (``atropos-grpo --loss-type``, with the settings its paper uses) trains the demo's warm-started
tiny model on the demo's task through the demo's whole pipeline (``run-api``, the trainer with its hf
inference server, the arithmetic environment; :func:`benchmarks.e2e_vs_trl.run_ours`) for ``--duration``
seconds of training time; every ``--eval-every`` seconds the newest checkpoint is set aside, and after all
runs every snapshot is evaluated with the demo's own code (greedy, the same held-out problems). The loss
types run one after the other in each round, in a rotated order from round to round. Printed: steps/min,
the seconds each needs to reach each accuracy level (the warm start's accuracy plus ``--gains``) and its
ratio to ``grpo`` measured in the same run (< 1: earlier), the accuracy at the end.

    python benchmarks/loss_types.py [--duration 90] [--repeats 1] [--eval-every 10] [--losses grpo dapo ...]

Exit status 0 after printing the table, 2 for bad flags.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# (importing it also sets the benchmarks' environment: wandb disabled, hub offline)
from benchmarks import e2e_vs_trl  # noqa: E402

PROG = "benchmarks/loss_types.py"
#: Each loss type's flags, as its paper sets them (the trainer's names; DAPO's budget is the demo's 8 tokens).
LOSSES: dict[str, dict[str, Any]] = {
    "grpo": {},
    "dr_grpo": {},
    "dapo": {"clip_eps_low": 0.2, "clip_eps_high": 0.28},
    "gspo": {"clip_eps_low": 3e-4, "clip_eps_high": 4e-4},
    "cispo": {"clip_eps_low": 0.9, "clip_eps_high": 0.28, "advantage": "rloo"},
}


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "never" if value is None else format(value, spec)


def _median(values: list[float | None]) -> float | None:
    """Median of the runs' values; None when any run never got there (a level not reached in every round)."""
    if not values or any(v is None for v in values):
        return None
    return statistics.median(v for v in values if v is not None)


def table(results: dict[str, list[Any]], levels: list[float]) -> str:
    """The markdown table of the median figures per loss type, times as ratios to grpo's."""
    base = (
        {level: _median([r.time_to(level) for r in results["grpo"]]) for level in levels}
        if "grpo" in results
        else {}
    )
    head = (
        "| loss type | steps/min | "
        + " | ".join(f"s to {lv:.3f}" for lv in levels)
        + " | accuracy at the end |"
    )
    lines = [head, "|" + "---|" * (3 + len(levels))]
    for loss, runs in results.items():
        cells = [loss, _fmt(statistics.median(r.steps_per_min for r in runs))]
        for level in levels:
            t = _median([r.time_to(level) for r in runs])
            ratio = f" ({t / base[level]:.2f}x)" if t is not None and base.get(level) else ""
            cells.append(_fmt(t) + ratio)
        cells.append(_fmt(statistics.median(r.snapshots[-1].accuracy for r in runs), ".3f"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=90.0, help="training seconds per run")
    parser.add_argument("--repeats", type=int, default=1, help="rounds (every loss type once per round)")
    parser.add_argument("--eval-every", type=float, default=10.0, help="seconds between snapshots")
    parser.add_argument(
        "--gains", type=float, nargs="+", default=[0.05, 0.10, 0.15], help="levels: warm + gain"
    )
    parser.add_argument("--losses", nargs="+", choices=list(LOSSES), default=list(LOSSES))
    parser.add_argument("--eval-size", type=int, default=500, help="held-out problems")
    parser.add_argument("--work-dir", default=None, help="keep runs here (default: a temporary directory)")
    parser.add_argument("--json", default=None, help="write every figure to this file")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.repeats < 1 or args.eval_every <= 0:
        parser.error("--duration and --eval-every must be > 0, --repeats >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(1)
    # the demo pipeline's settings of benchmarks/e2e_vs_trl.py (hf backend), our duration and snapshots
    base = e2e_vs_trl.parse_args(["--only", "ours", "--duration", str(args.duration), "--eval-every", str(args.eval_every),
                     "--eval-size", str(args.eval_size)])  # fmt: skip
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="loss-types-"))
    work.mkdir(parents=True, exist_ok=True)
    warm = e2e_vs_trl.warm_checkpoint(base)
    results: dict[str, list[Any]] = {loss: [] for loss in args.losses}
    try:
        for rnd in range(args.repeats):
            order = args.losses[rnd % len(args.losses) :] + args.losses[: rnd % len(args.losses)]
            for loss in order:
                print(f"round {rnd}: {loss} for {args.duration:.0f} s ...", flush=True)
                run_args = argparse.Namespace(
                    **vars(base), demo_overrides={"loss_type": loss, **LOSSES[loss]}
                )
                results[loss].append(e2e_vs_trl.run_ours(run_args, warm, work / loss, rnd))
        print("evaluating the snapshots ...", flush=True)
        everything = [r for runs in results.values() for r in runs]
        e2e_vs_trl.evaluate_snapshots(everything, base, warm)
        start = everything[0].snapshots[0].accuracy
        levels = [round(start + gain, 3) for gain in args.gains]
        print(
            f"\nwarm start {start:.3f}; {args.duration:.0f} s of training per run, {args.repeats} round(s)\n"
        )
        print(table(results, levels))
        if args.json:
            payload = {loss: [{"steps": r.steps, "train_s": r.train_s,
                               "snapshots": [(s.t, s.step, s.accuracy) for s in r.snapshots]} for r in runs]
                       for loss, runs in results.items()}  # fmt: skip
            Path(args.json).write_text(json.dumps(payload, indent=2))
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
