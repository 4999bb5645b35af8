"""Eval core overhead: CPU per item and the share of an inference-bound rate a multiple-choice evaluation reaches.

A 1,000-item MMLU-schema data set is written to a temporary directory and evaluated with
``environments/eval_environments/mmlu_eval.py`` (the eval core: prompts, requests, letter extraction,
journal, metrics, ``samples.jsonl``) against the scripted server (``atroposlib.testing.scripted_server``, its
own process, so its CPU is not counted here). Beside each run, the baseline: the same requests through the
same client (``ServerManager.chat_completion``) at the same concurrency, with no eval core around them.

1. Instant answers: CPU milliseconds per item of this process, eval vs baseline; their difference is what the
   eval core itself costs per item.
2. Answers after ``--delay`` seconds at ``--concurrency`` requests in flight: no run of N items can take less
   than ``ceil(N / concurrency) * delay`` seconds, so ``bound = N / (ceil(N / concurrency) * delay)`` items/s;
   printed: items/s and the fraction of the bound, eval and baseline, and their ratio. Target: the eval
   reaches >= 95 % of the bound.

    python benchmarks/eval_overhead.py [--items 1000] [--concurrency 64] [--delay 1.0] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REPLY = "<think>The second option is right.</think><answer>B</answer>"


def write_items(directory: Path, count: int) -> Path:
    """``count`` MMLU rows, spread over four subjects, as per-subject files."""
    subjects = ("anatomy", "astronomy", "marketing", "philosophy")
    for s, subject in enumerate(subjects):
        with open(directory / f"{subject}.jsonl", "w", encoding="utf-8") as fh:
            for i in range(s, count, len(subjects)):
                row = {
                    "question": f"Question {i}: which of these statements about item {i * 7919 % 1000} holds?",
                    "subject": subject,
                    "choices": [f"Statement {i}-{k} about the topic at hand" for k in range(4)],
                    "answer": i % 4,
                }
                fh.write(json.dumps(row) + "\n")
    return directory


def build_env(base_url: str, data: Path, out: Path, concurrency: int):
    """The MMLU evaluation, configured as ``mmlu_eval.py evaluate`` would be."""
    from atroposlib.envs.cli import parse_command
    from atroposlib.envs.cli.command import construct_env
    from atroposlib.evals.suite import load_env_class

    env_cls = load_env_class(REPO / "environments" / "eval_environments" / "mmlu_eval.py")
    args = [
        "evaluate", "--openai.base_url", base_url, "--openai.model_name", "scripted-model",
        "--openai.num_requests_for_eval", str(concurrency), "--env.dataset_path", str(data),
        "--env.data_dir_to_save_evals", str(out), "--env.max_eval_workers", str(concurrency),
        "--env.use_wandb", "false", "--env.eval_temperature", "0",
    ]  # fmt: skip
    env = construct_env(env_cls, parse_command(env_cls, args).resolve())

    class Quiet:  # no progress bar: its drawing is not the core's cost
        def update(self, n: int = 1) -> None: ...

        def close(self) -> None: ...

    env.progress = lambda total, name: Quiet()
    return env


async def run_eval(env) -> tuple[float, float, int]:
    """``(wall s, CPU s, items)`` of the evaluation and its report (after set-up: reading and checking the
    rows, building the items, which ``main`` times apart)."""
    wall, cpu = time.perf_counter(), time.process_time()
    metrics = await env.evaluate()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await env._close_inference_clients()
    assert metrics["eval/num_items"] == len(env.items)
    return wall, cpu, len(env.items)


async def run_baseline(base_url: str, prompts: list, concurrency: int) -> tuple[float, float, int]:
    """``(wall s, CPU s, requests)`` of the same requests (``prompts``: the eval's chat messages) through the
    same client, nothing else."""
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig
    from atroposlib.envs.server_handling.server_manager import ServerManager

    manager = ServerManager(
        [
            APIServerConfig(
                base_url=base_url, model_name="scripted-model", api_key="x", num_requests_for_eval=concurrency
            )
        ]
    )
    semaphore = asyncio.Semaphore(concurrency)

    async def one(messages: list) -> str:
        async with semaphore:
            completion = await manager.chat_completion(messages=messages, n=1, temperature=0.0, split="eval")
            return completion.choices[0].message.content

    count = len(prompts)
    wall, cpu = time.perf_counter(), time.process_time()
    replies = await asyncio.gather(*(one(messages) for messages in prompts))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await manager.close()
    assert replies.count(REPLY) == count
    return wall, cpu, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--delay", type=float, default=1.0, help="seconds the server takes per request (phase 2)"
    )
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from atroposlib.testing.scripted_server import launch_scripted_server

    results: dict = {"items": args.items, "concurrency": args.concurrency, "delay_s": args.delay}
    with (
        tempfile.TemporaryDirectory() as tmp,
        launch_scripted_server(responses=[REPLY], in_subprocess=True) as server,
    ):
        data = write_items(Path(tmp), args.items)
        runs = {}
        for phase, delay in (("instant", 0.0), ("bound", args.delay)):
            server.control(delay_s=delay)
            env = build_env(server.base_url, data, Path(tmp) / f"out-{phase}", args.concurrency)
            start = time.perf_counter()
            asyncio.run(env.setup())
            env.setup_seconds = time.perf_counter() - start
            prompts = [env.messages(item) for item in env.items]  # the baseline sends the eval's own requests
            asyncio.run(
                run_baseline(server.base_url, prompts[: 2 * args.concurrency], args.concurrency)
            )  # warm-up
            base = asyncio.run(run_baseline(server.base_url, prompts, args.concurrency))
            ev = asyncio.run(run_eval(env))
            runs[phase] = {"baseline": base, "eval": ev, "setup_s": env.setup_seconds}

    print(
        f"\n{args.items}-item multiple-choice evaluation (mmlu_eval.py), {args.concurrency} requests in flight\n"
    )
    print("1. instant answers: CPU per item of this process")
    inst = runs["instant"]
    cpu_eval = inst["eval"][1] / inst["eval"][2] * 1000
    cpu_base = inst["baseline"][1] / inst["baseline"][2] * 1000
    print(
        f"   {'client only (baseline)':<26} {cpu_base:7.3f} ms/item   {inst['baseline'][2] / inst['baseline'][0]:8.1f} items/s"
    )
    print(
        f"   {'eval core + client':<26} {cpu_eval:7.3f} ms/item   {inst['eval'][2] / inst['eval'][0]:8.1f} items/s"
    )
    print(
        f"   eval core's own cost: {cpu_eval - cpu_base:.3f} ms/item ({cpu_eval / cpu_base:.2f}x the client alone)"
    )
    waves = math.ceil(args.items / args.concurrency)
    bound = args.items / (waves * args.delay)
    print(
        f"\n2. answers after {args.delay:g} s: bound = {args.items} / ({waves} waves x {args.delay:g} s) = {bound:.1f} items/s"
    )
    fractions = {}
    for label, key in (("client only (baseline)", "baseline"), ("eval core + client", "eval")):
        wall, _, count = runs["bound"][key]
        rate = count / wall
        fractions[key] = rate / bound
        print(f"   {label:<26} {rate:8.1f} items/s   {fractions[key]:6.1%} of the bound")
    print(
        f"   eval / baseline: {fractions['eval'] / fractions['baseline']:.3f}   (target: eval >= 95% of the bound)"
    )
    results.update(
        cpu_ms_per_item={"eval": cpu_eval, "baseline": cpu_base, "core": cpu_eval - cpu_base},
        fraction_of_bound=fractions,
        bound_items_per_s=bound,
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    sys.exit(0)


if __name__ == "__main__":
    main()
