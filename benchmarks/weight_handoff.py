"""Trainer time lost per step to handing new weights to the inference server: checkpoint vs broadcast.

Run through ``python benchmarks/weight_refresh.py --hand-off`` (see there). For each model shape (the tests'
tiny model, and a randomly initialised model of Qwen2.5-0.5B's configuration, built locally), with the
inference server running (``VllmManager``, ``--inference-backend hf``) and the trainer's model and AdamW
state in this process:

* ``step``: one optimizer step (forward, backward, clip, AdamW) on ``--batch`` x ``--seq`` random tokens,
  the baseline every figure is divided by;
* ``checkpoint`` (before): what the trainer did at every refresh, writing the full checkpoint (weights,
  optimizer state, RNG) and waiting for the server's in-place reload of it (``/bridge/update_weights``);
* ``broadcast`` (after, ``--refresh-mode broadcast``): the weights sent over a gloo group into the server,
  waiting until it serves them;
* ``broadcast async`` (after, ``--weight-broadcast-async``): the weights are sent from the parameters
  themselves while the next step computes its gradients, and that step's optimizer update waits until they
  are sent; the time lost is the time ``send`` held the trainer plus how much longer the overlapping step
  took than a step alone.

Every hand-off is checked: the server's logprobs of its greedy continuation of a fixed prompt must equal the
trainer model's (1e-5) afterwards.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import requests
import torch

PROMPT = [5, 17, 29, 41, 53, 65, 77]


def _served_diff(url: str, model: Any) -> float:
    body = {"prompt": {"prompt_token_ids": PROMPT}, "max_tokens": 4, "temperature": 0, "logprobs": 0}
    reply = requests.post(f"{url}/generate", json=body, timeout=600).json()
    ids = reply["token_ids"][0]
    served = [float(next(iter(pos[0].values()))) for pos in reply["logprobs"][0]]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([PROMPT + ids])).logits[0].float(), dim=-1)
    return max(
        abs(float(logp[len(PROMPT) - 1 + i, t]) - s) for i, (t, s) in enumerate(zip(ids, served, strict=True))
    )


def measure_shape(shape: str, work: Path, batch: int, seq: int, repeats: int) -> dict[str, Any]:
    from atroposlib.testing.api_process import free_port
    from example_trainer.demo.device_check import DeviceCheckConfig, build_model
    from example_trainer.grpo.checkpointing import save_checkpoint
    from example_trainer.grpo.config import TrainingConfig
    from example_trainer.grpo.model import load_model_and_tokenizer, trainable_parameters
    from example_trainer.grpo.step import create_optimizer
    from example_trainer.inference.vllm_manager import VllmManager
    from example_trainer.inference.weight_broadcast import WeightBroadcaster, unique_named_tensors
    from example_trainer.inference.weight_refresh import request_weight_update

    model_dir = build_model(DeviceCheckConfig(device="cpu", shape=shape, sft_steps=0), work / shape / "model")
    cfg = TrainingConfig(
        model_name=str(model_dir), device="cpu", optimizer="adamw", lr=1e-5, train_dtype="float32",
        save_path=str(work / shape / "ckpt"), inference_backend="hf", vllm_port=free_port(),
        log_dir=str(work / shape / "logs"), gradient_checkpointing=False, refresh_mode="broadcast",
    )  # fmt: skip
    model, tokenizer = load_model_and_tokenizer(cfg)
    optimizer = create_optimizer(trainable_parameters(model), cfg)
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(5, min(800, model.config.vocab_size), (batch, seq))

    def step(before_update=lambda: None) -> float:
        start = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        before_update()  # the trainer's optimizer pre-hook
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    manager = VllmManager(cfg)
    manager.start(str(model_dir))
    out: dict[str, Any] = {"shape": shape, "parameters": params, "tokens_per_step": batch * seq}
    try:
        step()  # warm-up (allocates the optimizer state)
        steps = [step() for _ in range(repeats)]
        out["step_s"] = statistics.median(steps)
        ckpt, diffs = [], []
        for i in range(repeats):
            step()
            start = time.perf_counter()
            path = save_checkpoint(model, tokenizer, optimizer, cfg, 100 + i)
            request_weight_update(manager.root_url, path)
            ckpt.append(time.perf_counter() - start)
            diffs.append(_served_diff(manager.root_url, model))
        out["checkpoint_s"] = statistics.median(ckpt)
        sender = WeightBroadcaster([manager.root_url])
        try:
            start = time.perf_counter()
            sender.connect()
            out["broadcast_connect_s"] = time.perf_counter() - start
            sync = []
            for _ in range(repeats):
                step()
                sync.append(sender.send(unique_named_tensors(model)))
                diffs.append(_served_diff(manager.root_url, model))
            out["broadcast_s"] = statistics.median(sync)
            lost, overlapped = [], []
            for _ in range(repeats):
                step()
                snapshot = {n: t.detach().clone() for n, t in model.state_dict().items()}
                held = sender.send(unique_named_tensors(model), wait=False)
                next_step = step(sender.wait_sent)  # overlaps the transfer
                sender.wait()
                overlapped.append(next_step)
                lost.append(held + max(0.0, next_step - out["step_s"]))
                served = model.state_dict()
                with torch.no_grad():  # check what was sent: the weights before the overlapping step
                    current = {n: t.clone() for n, t in served.items()}
                    model.load_state_dict(snapshot)
                    diffs.append(_served_diff(manager.root_url, model))
                    model.load_state_dict(current)
            out["broadcast_async_lost_s"] = statistics.median(lost)
            out["overlapped_step_s"] = statistics.median(overlapped)
        finally:
            sender.close()
        out["max_logprob_diff"] = max(diffs)
        assert out["max_logprob_diff"] < 1e-5, f"served logprobs differ by {out['max_logprob_diff']}"
    finally:
        manager.stop()
    for key in ("checkpoint_s", "broadcast_s", "broadcast_async_lost_s"):
        out[key.replace("_s", "_pct_of_step")] = 100 * out[key] / out["step_s"]
    return out


def run(shapes: list[str], batch: dict[str, int], seq: int, repeats: int) -> list[dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix="weight-handoff-bench-"))
    results = []
    for shape in shapes:
        print(f"--- {shape}", flush=True)
        results.append(measure_shape(shape, work, batch[shape], seq, repeats))
        print(format_row(results[-1]), flush=True)
    return results


def format_row(r: dict[str, Any]) -> str:
    return (
        f"{r['shape']:<13} {r['parameters'] / 1e6:7.1f} M  step {r['step_s']:7.2f} s ({r['tokens_per_step']} tok) | "
        f"checkpoint {r['checkpoint_s']:7.3f} s = {r['checkpoint_pct_of_step']:6.2f}% | "
        f"broadcast {r['broadcast_s']:7.3f} s = {r['broadcast_pct_of_step']:6.2f}% | "
        f"async lost {r['broadcast_async_lost_s']:7.3f} s = {r['broadcast_async_lost_pct_of_step']:6.2f}% | "
        f"checkpoint / broadcast {r['checkpoint_s'] / r['broadcast_s']:5.1f}x, "
        f"/ async {r['checkpoint_s'] / r['broadcast_async_lost_s']:5.1f}x | max |dlogp| {r['max_logprob_diff']:.1e}"
    )
