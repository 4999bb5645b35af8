"""Rollouts generated and never trained on the demo, with the staleness bound enforced by the trainer alone
(it drops what is too old) and before generation (the environment waits), side by side in one run.

Both runs are the demo (hf backend) for ``--steps`` steps with ``--max-staleness N``; in the first the
environment keeps its own queue limit (``--env-max-staleness`` above ``--max-batches-offpolicy``, i.e. it does
not wait for the trainer, the behaviour before the bound reached the environment), in the second it takes the
trainer's bound from the API. Counted per run, in sequences: generated (the environment's rollout stats),
dropped by the environment for all-equal scores (no learning signal, by design), trained (the trainer's
batches), dropped by the trainer as stale, and left over when the run ended (sent, never trained); generated
is what the environment sent plus what it discarded (its closing log line).

    python benchmarks/staleness.py [--steps 40] [--max-staleness 0] [--max-batches-offpolicy 2]

Exit status 0 after printing the table, 2 for bad flags.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# (importing it also sets the benchmarks' environment: wandb disabled, hub offline)
from benchmarks.e2e_vs_trl import _NoProgress  # noqa: E402

PROG = "benchmarks/staleness.py"


def run_demo(args: argparse.Namespace, run_dir: Path, env_bound: bool) -> dict[str, Any]:
    """One demo run; its rollout accounting (sequences) and accuracies."""
    from rich.console import Console

    from example_trainer.demo.config import DemoConfig
    from example_trainer.demo.pipeline import Demo

    config = DemoConfig(
        steps=args.steps, eval_size=args.eval_size, inference_backend="hf", run_dir=str(run_dir),
        max_batches_offpolicy=args.max_batches_offpolicy, max_staleness=args.max_staleness,
        env_max_staleness=None if env_bound else 1000, batch_size=args.batch_size,
    )  # fmt: skip
    demo = Demo(config, Console(stderr=True, quiet=True))
    # the demo's run without its held-out evaluations (the counts need none)
    started = time.monotonic()
    model_dir = demo.prepare_model(_NoProgress())
    try:
        demo.start_services(model_dir)
        demo.wait_for_vllm(_NoProgress(), started)
        steps = demo.run_grpo(_NoProgress(), started)
    finally:
        demo.stop_services()
    # the environment's last line: "stopped: N groups sent, discarded {'identical_scores': M, ...}"
    log = (demo.logs / "environment.log").read_text()
    found = re.findall(r"stopped: (\d+) groups sent, discarded (\{[^}]*\}|0)", log)
    if not found:
        raise RuntimeError(
            f"the environment did not report what it sent (see {demo.logs / 'environment.log'})"
        )
    sent_groups, discarded = int(found[-1][0]), ast.literal_eval(found[-1][1]) or {}
    metrics = [json.loads(x) for x in (demo.ckpt_dir / "metrics.jsonl").read_text().splitlines()]
    trained = [m for m in metrics if "train/num_sequences" in m]
    equal = int(discarded.get("identical_scores", 0)) * config.group_size
    generated = (sent_groups + sum(int(n) for n in discarded.values())) * config.group_size
    stale = int(trained[-1].get("train/stale_sequences_total", 0)) if trained else 0
    used = int(sum(m["train/num_sequences"] for m in trained))
    staleness_max = max((m.get("train/staleness_max", 0.0) for m in trained), default=0.0)
    return {
        "generated": generated, "equal_scores": equal, "trained": used, "stale_dropped": stale,
        "left_over": generated - equal - used - stale, "staleness_max": staleness_max,
        "steps": steps, "seconds": time.monotonic() - started,
    }  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per run")
    parser.add_argument("--max-staleness", type=int, default=0, help="the trainer's bound")
    parser.add_argument("--max-batches-offpolicy", type=int, default=2, help="the environment's queue limit")
    parser.add_argument("--batch-size", type=int, default=256, help="sequences per step")
    parser.add_argument(
        "--eval-size",
        type=int,
        default=500,
        help="the task's held-out split (500: the demo's warm start cache)",
    )
    parser.add_argument(
        "--work-dir", default=None, help="keep the runs here (default: a temporary directory)"
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.max_staleness < 0 or args.max_batches_offpolicy < 1:
        parser.error("--steps and --max-batches-offpolicy must be >= 1, --max-staleness >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="staleness-"))
    rows = []
    for label, env_bound in (("trainer drops stale rollouts", False), ("environment waits (bound)", True)):
        print(f"{label}: {args.steps} steps ...", flush=True)
        rows.append((label, run_demo(args, work / ("bound" if env_bound else "drop"), env_bound)))
    print(
        f"\n--max-staleness {args.max_staleness}, --max-batches-offpolicy {args.max_batches_offpolicy}, "
        f"{args.steps} steps of {args.batch_size} sequences (counts in sequences)\n"
    )
    print("| run | generated | all-equal scores (dropped by the env) | trained | dropped as stale | left over "
          "at the end | generated, never trained | max staleness trained | steps | seconds |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, r in rows:
        never = r["stale_dropped"] + r["left_over"]
        print(f"| {label} | {r['generated']} | {r['equal_scores']} | {r['trained']} | {r['stale_dropped']} | "
              f"{r['left_over']} | {never} ({never / max(r['generated'], 1):.1%}) | {r['staleness_max']:.0f} | "
              f"{r['steps']} | {r['seconds']:.0f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
