"""Tokens/s of one GRPO optimizer step: this trainer vs TRL's ``GRPOTrainer`` on the same model and batch.

Both sides train the same local tiny Qwen2 model (float32, SDPA attention, CPU) on the same scored batch
(``--groups`` x ``--group-size`` sequences of a prompt plus a completion, with rollout log-probabilities),
split into the same micro-batches, with AdamW, gradient clipping at 1.0 and no KL term:

* ours: ``prepare_batch`` (padding, advantages) + ``run_training_step`` (forward, GRPO loss, backward per
  micro-batch, clip, step);
* TRL: a real ``GRPOTrainer`` (``loss_type="grpo"``); its inputs are built beforehand (not timed), then per
  micro-batch ``trainer.compute_loss`` + ``accelerator.backward``, then clip and its optimizer's step.
  (``GRPOTrainer.training_step`` would first generate completions, which is not what is measured here.)

The two are timed alternately, ``--repeats`` times after ``--warmup`` untimed rounds; the median is
reported, by wall clock and by process CPU time (on a busy machine the CPU-time figure, with
``--threads 1``, is the steadier one). Throughput counts real (unpadded) prompt+completion tokens.
Requires ``pip install trl``.

    python benchmarks/trainer_step.py                 # the tests' tiny model (~0.5 M parameters)
    python benchmarks/trainer_step.py --size small    # a wider, deeper tiny model (~3.4 M parameters)

**Long completions** (``--sweep 512:8,2048:8,8192:4``: completion length : sequences per step): for each
length, a batch whose completions have RL's mix of lengths (a quarter cut off at the length, the rest
log-uniform between 1/16 of it and it; prompts of up to ``--prompt-len`` tokens), trained by each side in a
fresh child process (the two alternate, ours first), ``--warmup`` untimed and ``--repeats`` timed steps.
TRL's micro-batches are ``--micro-batch`` sequences padded to their longest (TRL's ``GRPOTrainer`` has no
padding-free mode; it runs its fused, chunked LM head); ours are formed by ``--micro-batch-tokens`` = the
same ``--micro-batch`` x (prompt + completion length) tokens, rows sorted by length, padded (``--sequence-packing
auto`` packs only with flash-attention). Reported per side: median seconds per step (wall and CPU), and peak
memory: the largest resident set size (RSS, read from ``/proc/self/statm`` every 2 ms by a sampling thread)
during the steps minus the RSS before the first step, i.e. what training takes on top of the loaded model
and inputs (activations, gradients, optimizer state, logits).

    python benchmarks/trainer_step.py --size small --sweep 512:8,2048:8,8192:4 --repeats 3 --warmup 1
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

import torch  # noqa: E402

from atroposlib.testing.tiny_model import TinyModelSpec, build_tiny_model  # noqa: E402

SIZES = {
    "tiny": TinyModelSpec(),
    "small": TinyModelSpec(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
                           num_key_value_heads=2),
}  # fmt: skip


def rl_completion_length(rng: random.Random, longest: int) -> int:
    """A completion length as RL produces them: a quarter cut off at ``longest``, the rest log-uniform
    between ``longest / 16`` and ``longest``."""
    if rng.random() < 0.25:
        return longest
    return max(1, round(math.exp(rng.uniform(math.log(longest / 16), math.log(longest)))))


def make_batch(args: argparse.Namespace, vocab: int, mixed: bool = False) -> list[dict]:
    """Scored groups in the API's format: prompt + completion tokens, masks, scores, rollout logprobs.

    Completion lengths are uniform in ``[completion_len / 2, completion_len]``, or (``mixed``)
    :func:`rl_completion_length`."""
    rng = random.Random(args.seed)
    groups = []
    for _ in range(args.groups):
        prompt = [
            rng.randint(10, vocab - 1) for _ in range(rng.randint(args.prompt_len // 2, args.prompt_len))
        ]
        tokens, masks, logprobs, scores = [], [], [], []
        for _ in range(args.group_size):
            n = rl_completion_length(rng, args.completion_len) if mixed else rng.randint(args.completion_len // 2, args.completion_len)  # fmt: skip
            completion = [rng.randint(10, vocab - 1) for _ in range(n)]
            tokens.append(prompt + completion)
            masks.append([-100] * len(prompt) + completion)
            logprobs.append([1.0] * len(prompt) + [-rng.uniform(0.5, 4.0) for _ in completion])
            scores.append(float(rng.random() < 0.5))
        groups.append({"tokens": tokens, "masks": masks, "scores": scores, "inference_logprobs": logprobs,
                       "overrides": None, "generation_params": None, "group_overrides": None, "advantages": None})  # fmt: skip
    return groups


# --- ours --------------------------------------------------------------------------------------------


class Ours:
    def __init__(self, model_dir: Path, args: argparse.Namespace, groups: list[dict]) -> None:
        from example_trainer.grpo.config import TrainingConfig
        from example_trainer.grpo.model import load_model_and_tokenizer, trainable_parameters
        from example_trainer.grpo.step import create_optimizer

        self.config = TrainingConfig(
            model_name=str(model_dir), device="cpu", optimizer="adamw", lr=1e-5,
            batch_size=args.micro_batch, gradient_accumulation_steps=args.groups * args.group_size // args.micro_batch,
            save_path=tempfile.mkdtemp(), micro_batch_tokens=getattr(args, "micro_batch_tokens", None),
        )  # fmt: skip
        self.model, _ = load_model_and_tokenizer(self.config)
        self.optimizer = create_optimizer(trainable_parameters(self.model), self.config)
        self.groups = groups

    def step(self) -> None:
        from example_trainer.grpo.data import prepare_batch
        from example_trainer.grpo.step import run_training_step

        batch = prepare_batch(self.groups, self.config.batch_size)
        run_training_step(self.model, self.optimizer, batch, self.config, step=10)


# --- TRL ---------------------------------------------------------------------------------------------


class Trl:
    def __init__(self, model_dir: Path, args: argparse.Namespace, groups: list[dict]) -> None:
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import GRPOConfig, GRPOTrainer

        tok = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32, attn_implementation="sdpa"
        )
        n = args.groups * args.group_size
        self.accum = n // args.micro_batch
        trl_args = GRPOConfig(
            output_dir=tempfile.mkdtemp(), per_device_train_batch_size=args.micro_batch,
            gradient_accumulation_steps=self.accum, num_generations=args.group_size,
            max_completion_length=args.completion_len, use_cpu=True, report_to=[], bf16=False,
            learning_rate=1e-5, beta=0.0, loss_type="grpo", max_grad_norm=1.0, save_strategy="no",
            optim="adamw_torch",
        )  # fmt: skip
        dataset = Dataset.from_list([{"prompt": "1 + 1 ="}] * n)
        self.trainer = GRPOTrainer(
            model=model, reward_funcs=lambda completions, **_: [0.0] * len(completions), args=trl_args,
            train_dataset=dataset, processing_class=tok,
        )  # fmt: skip
        self.trainer.create_optimizer()
        self.trainer.current_gradient_accumulation_steps = self.accum
        self.model = self.trainer.model
        self.model.train()
        self.inputs = self._inputs(groups, args.micro_batch, tok.pad_token_id)

    @staticmethod
    def _inputs(groups: list[dict], micro: int, pad: int) -> list[dict]:
        """TRL's per-micro-batch tensors: left-padded prompts, right-padded completions, advantages, old logps."""
        from example_trainer.grpo.data import normalize_scores

        rows = []
        for g in groups:
            adv = normalize_scores(g["scores"])
            for i, (seq, mask) in enumerate(zip(g["tokens"], g["masks"], strict=True)):
                p = sum(1 for m in mask if m == -100)
                rows.append((seq[:p], seq[p:], float(adv[i]), g["inference_logprobs"][i][p:]))
        out = []
        for s in range(0, len(rows), micro):
            chunk = rows[s : s + micro]
            pl = max(len(r[0]) for r in chunk)
            cl = max(len(r[1]) for r in chunk)
            out.append(
                {
                    "prompt_ids": torch.tensor([[pad] * (pl - len(r[0])) + r[0] for r in chunk]),
                    "prompt_mask": torch.tensor([[0] * (pl - len(r[0])) + [1] * len(r[0]) for r in chunk]),
                    "completion_ids": torch.tensor([r[1] + [pad] * (cl - len(r[1])) for r in chunk]),
                    "completion_mask": torch.tensor(
                        [[1] * len(r[1]) + [0] * (cl - len(r[1])) for r in chunk]
                    ),
                    "advantages": torch.tensor([r[2] for r in chunk]),
                    "old_per_token_logps": torch.tensor([r[3] + [0.0] * (cl - len(r[3])) for r in chunk]),
                    "num_items_in_batch": torch.tensor(float(sum(len(r[1]) for r in rows))),
                }
            )
        return out

    def step(self) -> None:
        tr = self.trainer
        for inputs in self.inputs:
            loss = tr.compute_loss(self.model, inputs)
            tr.accelerator.backward(loss)
        tr.accelerator.clip_grad_norm_(self.model.parameters(), tr.args.max_grad_norm)
        tr.optimizer.step()
        tr.optimizer.zero_grad(set_to_none=True)


# --- long completions: each side in its own process -----------------------------------------------


class PeakRss:
    """The largest resident set size seen while active, sampled every ``interval`` seconds."""

    def __init__(self, interval: float = 0.002) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def current() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.current())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self.peak = self.current()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.current())


def _computed_tokens(side: str, impl: Ours | Trl, groups: list[dict]) -> int:
    """Positions the model runs per step, padding included."""
    if side == "trl":
        return sum(int(i["prompt_ids"].numel() + i["completion_ids"].numel()) for i in impl.inputs)
    from example_trainer.grpo.data import prepare_batch
    from example_trainer.grpo.packing import micro_batch_tokens, micro_batches, row_lengths

    config = impl.config
    batch = prepare_batch(groups, config.batch_size)
    return sum(
        micro_batch_tokens(row_lengths(mb.labels), False)
        for mb in micro_batches(batch, config.batch_size, config.micro_batch_tokens)
    )


def run_side(side: str, size: str, args: argparse.Namespace, results: Any) -> None:
    """Child process: train ``side`` on the sweep batch; put its timings and peak memory on ``results``."""
    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = build_tiny_model(SIZES[size])
    from transformers import AutoConfig

    groups = make_batch(args, AutoConfig.from_pretrained(model_dir).vocab_size, mixed=True)
    impl = Ours(model_dir, args, groups) if side == "atroposlib" else Trl(model_dir, args, groups)
    times, cpu = [], []
    baseline = PeakRss.current()
    with PeakRss() as rss:
        for i in range(args.warmup + args.repeats):
            start, start_cpu = time.perf_counter(), time.process_time()
            impl.step()
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
    results.put(
        {
            "side": side,
            "wall": statistics.median(times),
            "cpu": statistics.median(cpu),
            "peak_mib": (rss.peak - baseline) / 2**20,
            "tokens": sum(len(t) for g in groups for t in g["tokens"]),
            "computed": _computed_tokens(side, impl, groups),
        }
    )


def sweep(args: argparse.Namespace) -> None:
    """The long-completion sweep (see the module docstring): both sides per length, side by side."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    print(
        f"model {args.size}; torch {torch.__version__}, threads {args.threads or torch.get_num_threads()}; "
        f"micro-batch {args.micro_batch} sequences (TRL) / {args.micro_batch} x (prompt + completion) tokens "
        f"(ours); {args.warmup} warm-up + {args.repeats} timed steps per side"
    )
    print(
        "| completion length | sequences | tokens | side | s/step wall | s/step CPU | computed tokens "
        "| peak memory MiB |\n|---|---|---|---|---|---|---|---|"
    )
    for entry in args.sweep.split(","):
        length, sequences = (int(x) for x in entry.split(":"))
        run_args = argparse.Namespace(**vars(args))
        run_args.completion_len = length
        run_args.groups = max(1, sequences // args.group_size)
        run_args.micro_batch_tokens = args.micro_batch * (args.prompt_len + length)
        row = {}
        for side in ("atroposlib", "trl"):
            results = ctx.Queue()
            proc = ctx.Process(target=run_side, args=(side, args.size, run_args, results))
            proc.start()
            row[side] = results.get()
            proc.join()
            r = row[side]
            print(
                f"| {length} | {run_args.groups * args.group_size} | {r['tokens']} | {side} | {r['wall']:.2f} "
                f"| {r['cpu']:.2f} | {r['computed']} | {r['peak_mib']:.0f} |",
                flush=True,
            )
        ours, trl = row["atroposlib"], row["trl"]
        print(
            f"|   | speed-up x{trl['wall'] / ours['wall']:.2f} wall, x{trl['cpu'] / ours['cpu']:.2f} CPU; "
            f"peak memory ours / TRL {ours['peak_mib'] / max(trl['peak_mib'], 1e-9):.2f} |",
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # fmt: skip
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny", help="tiny model size")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=32, help="max prompt tokens")
    parser.add_argument("--completion-len", type=int, default=128, help="max completion tokens")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument(
        "--sweep",
        default=None,
        help="long completions instead: comma-separated LENGTH:SEQUENCES, e.g. 512:8,2048:8,8192:4 "
        "(each side in its own process; peak memory reported)",
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.sweep:
        try:
            import trl  # noqa: F401
        except ImportError:
            sys.exit("TRL is not installed: pip install trl")
        sweep(args)
        return
    if (args.groups * args.group_size) % args.micro_batch:
        parser.error("--micro-batch must divide --groups x --group-size")
    try:
        import trl
    except ImportError:
        sys.exit("TRL is not installed: pip install trl")

    model_dir = build_tiny_model(SIZES[args.size])
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model_dir)
    groups = make_batch(args, cfg.vocab_size)
    tokens = sum(len(t) for g in groups for t in g["tokens"])
    ours, theirs = Ours(model_dir, args, groups), Trl(model_dir, args, groups)
    n_params = sum(p.numel() for p in ours.model.parameters())
    print(
        f"model {args.size} ({n_params / 1e6:.2f} M params, {cfg.num_hidden_layers} layers, width {cfg.hidden_size}); "
        f"batch {args.groups}x{args.group_size} sequences, {tokens} tokens, micro-batch {args.micro_batch}; "
        f"torch {torch.__version__} threads {torch.get_num_threads()}; trl {trl.__version__}"
    )
    times: dict[str, list[float]] = {"atroposlib": [], "trl": []}
    cpu: dict[str, list[float]] = {"atroposlib": [], "trl": []}
    for i in range(args.warmup + args.repeats):
        for name, impl in (("atroposlib", ours), ("trl", theirs)) if i % 2 == 0 else (("trl", theirs), ("atroposlib", ours)):  # fmt: skip
            start, start_cpu = time.perf_counter(), time.process_time()
            impl.step()
            if i >= args.warmup:
                times[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    for name in ("atroposlib", "trl"):
        print(
            f"{name:>11}: {med[name] * 1000:8.1f} ms/step wall {tokens / med[name]:9.0f} tokens/s   "
            f"{med_cpu[name] * 1000:8.1f} ms/step CPU {tokens / med_cpu[name]:9.0f} tokens/CPU-s"
        )
    print(
        f"ratio (atroposlib / TRL tokens/s): wall {med['trl'] / med['atroposlib']:.2f}, "
        f"CPU time {med_cpu['trl'] / med_cpu['atroposlib']:.2f}  (target >= 1.0)"
    )


if __name__ == "__main__":
    main()
