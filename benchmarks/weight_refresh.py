"""How long does it take the trainer's vLLM server to serve new weights?

Runs the real server (``example_trainer.inference.vllm_api_server`` under ``VllmManager``) on the tiny local
model and times, from the trainer's side, until the server answers with the new weights:

* ``restart``       stop vLLM and start it on the new checkpoint (the original trainer's way);
* ``reload``        in-place reload through ``POST /bridge/update_weights`` (no restart);
* ``lora_restart``  restart on the base model, then activate the adapter;
* ``lora hot-swap`` load a new adapter into the running server.

Every refresh is checked: the served logprobs of a fixed prompt must equal Hugging Face transformers'
float32 logprobs of the weights just installed. Prints a table and the speed-up ratios.

    python benchmarks/weight_refresh.py [--restarts 2] [--reloads 10] [--swaps 10] [--enforce-eager]
                                        [--json results.json]

``--hand-off`` measures instead what a refresh costs the *trainer* per step, before (a checkpoint written and
reloaded) and after (the weights broadcast into the server, waiting or in the background), for the tiny
model and a random model of Qwen2.5-0.5B's shape (see ``benchmarks/weight_handoff.py``):

    python benchmarks/weight_refresh.py --hand-off [--shapes tiny qwen2.5-0.5b] [--repeats 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atroposlib.testing.api_process import free_port  # noqa: E402
from atroposlib.testing.tiny_model import build_tiny_model  # noqa: E402
from example_trainer.inference.vllm_manager import VllmManager, VllmManagerConfig  # noqa: E402
from tests.helpers.inference import (  # noqa: E402
    assert_close,
    hf_prompt_logprobs,
    make_adapter,
    make_checkpoint,
    served_prompt_logprobs,
)


def _timed(label: str, results: dict[str, list[float]], fn, expect: list[float], mgr: VllmManager) -> None:
    """Run one refresh, time it until the server serves, and check the served logprobs."""
    start = time.perf_counter()
    fn()
    served = served_prompt_logprobs(mgr.root_url)  # first answer with the new weights
    seconds = time.perf_counter() - start
    assert_close(served, expect)
    results.setdefault(label, []).append(seconds)
    print(f"  {label:<14} {seconds:8.3f} s", flush=True)


def run(args: argparse.Namespace) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="weight-refresh-bench-") as tmp:
        return _run_in(Path(tmp), args)


def _run_in(work: Path, args: argparse.Namespace) -> dict[str, list[float]]:
    base = build_tiny_model()
    ckpts = [make_checkpoint(base, work / f"step_{i}", seed=i) for i in (1, 2)]
    adapters = [make_adapter(base, work / f"adapter_step_{i}", seed=10 + i) for i in (1, 2)]
    ref_ckpt = {str(p): hf_prompt_logprobs(p) for p in [base, *ckpts]}
    ref_adapter = {str(a): hf_prompt_logprobs(base, adapter=a) for a in adapters}

    config = VllmManagerConfig(
        model_name="tiny",
        vllm_port=free_port(),
        max_model_len=512,
        refresh_mode="restart",
        enforce_eager=args.enforce_eager,
        log_dir=str(work / "logs"),
        startup_timeout=1800,
        watch_interval=None,
    )
    results: dict[str, list[float]] = {}
    with VllmManager(config) as mgr:
        print("starting vLLM ...", flush=True)
        _timed("cold start", results, lambda: mgr.start(str(base)), ref_ckpt[str(base)], mgr)
        for i in range(args.restarts):
            target = ckpts[i % 2]
            _timed(
                "restart", results, lambda t=target, i=i: mgr.refresh(str(t), i), ref_ckpt[str(target)], mgr
            )
        mgr.config.refresh_mode = "reload"
        for i in range(args.reloads):
            target = ckpts[i % 2]
            _timed(
                "reload", results, lambda t=target, i=i: mgr.refresh(str(t), i), ref_ckpt[str(target)], mgr
            )
        # LoRA: back to the base weights in a LoRA-enabled server (this is lora_restart's refresh).
        mgr.config.refresh_mode = "lora_restart"
        for i in range(max(1, args.restarts // 2)):
            adapter = adapters[i % 2]
            _timed(
                "lora_restart",
                results,
                lambda a=adapter, i=i: mgr.refresh(str(a), i),
                ref_adapter[str(adapter)],
                mgr,
            )
        mgr.config.refresh_mode = "lora"
        for i in range(args.swaps):
            adapter = adapters[(i + 1) % 2]
            _timed(
                "lora hot-swap",
                results,
                lambda a=adapter, i=i: mgr.refresh(str(a), 100 + i),
                ref_adapter[str(adapter)],
                mgr,
            )
    return results


def report(results: dict[str, list[float]]) -> dict[str, float]:
    print(f"\n{'refresh':<15}{'n':>4}{'median s':>12}{'min s':>10}{'max s':>10}")
    medians = {}
    for label, times in results.items():
        medians[label] = statistics.median(times)
        print(f"{label:<15}{len(times):>4}{medians[label]:>12.3f}{min(times):>10.3f}{max(times):>10.3f}")
    ratios = {}
    if "restart" in medians and "reload" in medians:
        ratios["restart / reload"] = medians["restart"] / medians["reload"]
    if "lora_restart" in medians and "lora hot-swap" in medians:
        ratios["lora_restart / lora hot-swap"] = medians["lora_restart"] / medians["lora hot-swap"]
    print()
    for name, value in ratios.items():
        print(f"{name}: {value:.0f}x faster without a restart")
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--restarts", type=int, default=2, help="restart refreshes to time")
    parser.add_argument("--reloads", type=int, default=10, help="in-place reloads to time")
    parser.add_argument("--swaps", type=int, default=10, help="LoRA hot-swaps to time")
    parser.add_argument("--enforce-eager", action="store_true", help="start vLLM without torch.compile")
    parser.add_argument("--json", help="also write the timings and ratios to this file")
    parser.add_argument(
        "--hand-off", action="store_true", help="trainer time lost per step: checkpoint vs broadcast"
    )
    parser.add_argument(
        "--shapes", nargs="+", default=["tiny", "qwen2.5-0.5b"], choices=["tiny", "qwen2.5-0.5b"]
    )
    parser.add_argument("--repeats", type=int, default=2, help="--hand-off: timed repetitions of each")
    parser.add_argument("--seq", type=int, default=128, help="--hand-off: tokens per sequence of a step")
    parser.add_argument(
        "--tiny-batch", type=int, default=64, help="--hand-off: sequences per step, tiny model"
    )
    parser.add_argument("--batch", type=int, default=4, help="--hand-off: sequences per step, 0.5B shape")
    args = parser.parse_args()
    if args.hand_off:
        from benchmarks.weight_handoff import run as run_hand_off

        batches = {"tiny": args.tiny_batch, "qwen2.5-0.5b": args.batch}
        results = run_hand_off(args.shapes, batches, args.seq, args.repeats)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
        return
    if min(args.restarts, args.reloads, args.swaps) < 1:
        parser.error("--restarts, --reloads and --swaps must be >= 1")
    results = run(args)
    ratios = report(results)
    if args.json:
        Path(args.json).write_text(json.dumps({"seconds": results, "ratios": ratios}, indent=2))


if __name__ == "__main__":
    main()
