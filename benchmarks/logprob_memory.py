"""Peak memory and time of the trained tokens' log-probabilities (forward + backward) on a real model shape.

A randomly initialised model of Qwen2.5-0.5B's shape (152k vocabulary, built locally from its config, no
hub) computes the log-probabilities of a batch of mixed-length sequences and backpropagates a weighted sum
of them, three ways:

* ``full logits``: ``model(tokens).logits`` over the padded batch, then ``log_softmax`` and a gather (the
  trainer before the chunked head: the ``[B, K, V]`` logits exist, in the model's dtype and in float32);
* ``chunked, padded``: :func:`example_trainer.grpo.logprobs.sequence_logprobs` on the padded rows, the output head
  run ``--chunk`` positions at a time (forward and backward);
* ``chunked, packed``: the same on the rows packed into one padding-free row (position ids restarting per
  sequence). With SDPA (no flash-attention installed) transformers gives the packed row a block-diagonal
  ``T x T`` mask, so this row is skipped when ``T`` is over ``--max-packed``.

Each way reports the peak memory above what the model and inputs hold (``torch.cuda.max_memory_allocated``;
CUDA only), the median time of ``--repeats`` runs, and the largest difference of its log-probabilities from
the full-logits ones.

    python benchmarks/logprob_memory.py --device cuda --lengths 2048,8192 --rows 4
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

#: Qwen2.5-0.5B's architecture (its config.json), without its weights.
QWEN25_05B = dict(
    hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
    vocab_size=151936, max_position_embeddings=32768, rope_theta=1_000_000.0, tie_word_embeddings=True,
    rms_norm_eps=1e-6,
)  # fmt: skip


def build_model(device: str, dtype: torch.dtype, layers: int | None) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**{**QWEN25_05B, **({"num_hidden_layers": layers} if layers else {})})
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(dtype)
    return model.train()


def make_rows(longest: int, rows: int, vocab: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``tokens``, ``labels`` [rows, longest]: lengths mixed as RL produces them (one at ``longest``, the
    rest log-uniform down to ``longest / 16``), the first 64 positions a prompt (not scored)."""
    from example_trainer.grpo.data import IGNORE_INDEX

    rng = random.Random(seed)
    lengths = [longest] + [
        max(80, round(math.exp(rng.uniform(math.log(longest / 16), math.log(longest)))))
        for _ in range(rows - 1)
    ]
    tokens = torch.zeros((rows, longest), dtype=torch.long)
    labels = torch.full((rows, longest), IGNORE_INDEX)
    g = torch.Generator().manual_seed(seed)
    for r, n in enumerate(lengths):
        seq = torch.randint(10, vocab, (n + 1,), generator=g)
        tokens[r, :n] = seq[:n]
        labels[r, 64:n] = seq[65 : n + 1]
    return tokens, labels


def full_logits(model, tokens, labels, temperatures):
    from example_trainer.grpo.loss import token_logprobs

    return token_logprobs(model(tokens).logits, labels, temperatures)


def computations(model, tokens, labels, temperatures, args, packed: bool) -> dict:
    """The ways to compare, by name: each a function returning the log-probabilities [B, K]."""
    from example_trainer.grpo.logprobs import sequence_logprobs

    device = args.device

    def chunked(packed: bool):
        return lambda: sequence_logprobs(
            model, tokens, labels, temperatures, packed=packed, chunk_tokens=args.chunk, device=device
        )[0]

    ways = {
        "full logits": lambda: full_logits(
            model, tokens.to(device), labels.to(device), temperatures.to(device)
        ),
        "chunked, padded": chunked(False),
    }
    if packed:
        ways["chunked, packed"] = chunked(True)
    return ways


def measure(fn, device: str, repeats: int) -> tuple[float, float, torch.Tensor]:
    """(peak MiB above the start, median seconds, log-probabilities) of ``fn().backward``-style runs."""
    times, peak, logp = [], 0.0, None
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        start = time.perf_counter()
        logp = fn()
        weights = torch.linspace(-1, 1, logp.numel(), device=logp.device).view(logp.shape)
        (logp.float() * weights).sum().backward()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            peak = max(peak, (torch.cuda.max_memory_allocated() - base) / 2**20)
        times.append(time.perf_counter() - start)
        logp = logp.detach()
    return peak, statistics.median(times), logp


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--lengths", default="2048,8192", help="longest sequence of each batch")
    parser.add_argument("--rows", type=int, default=4, help="sequences per batch")
    parser.add_argument("--layers", type=int, default=None, help="fewer decoder layers (default: 24)")
    parser.add_argument(
        "--chunk", type=int, default=None, help="positions per head chunk (default: 2^25 / V)"
    )
    parser.add_argument("--max-packed", type=int, default=16384, help="largest packed row (SDPA mask: T x T)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    model = build_model(args.device, dtype, args.layers)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    print(
        f"Qwen2.5-0.5B shape ({params:.0f} M parameters, {model.config.num_hidden_layers} layers), {args.dtype}, {name}"
    )
    print(
        "| longest | rows | tokens | way | peak MiB | ms | max abs diff vs full |\n|---|---|---|---|---|---|---|"
    )
    for longest in (int(x) for x in args.lengths.split(",")):
        tokens, labels = make_rows(longest, args.rows, model.config.vocab_size)
        temperatures = torch.ones((args.rows, 1, 1))
        n_tokens = int((tokens != 0).sum())
        ways = computations(model, tokens, labels, temperatures, args, packed=n_tokens <= args.max_packed)
        reference = None
        for way, fn in ways.items():
            model.zero_grad(set_to_none=True)
            try:
                peak, seconds, logp = measure(fn, args.device, args.repeats)
            except torch.OutOfMemoryError:
                print(f"| {longest} | {args.rows} | {n_tokens} | {way} | out of memory | | |", flush=True)
                model.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
                continue
            model.zero_grad(set_to_none=True)
            logp = logp.float().cpu()
            reference = logp if reference is None else reference
            diff = float((logp - reference).abs().max())
            memory = f"{peak:.0f}" if args.device.startswith("cuda") else "-"
            print(
                f"| {longest} | {args.rows} | {n_tokens} | {way} | {memory} | {seconds * 1000:.0f} | {diff:.3g} |",
                flush=True,
            )
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
