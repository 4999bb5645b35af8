"""Trainer time lost per step to handing new weights to the inference server, in every full-weight mode.

Run through ``python benchmarks/weight_refresh.py --hand-off`` (see there). For each model shape (the tests'
tiny model, and a randomly initialised model of Qwen2.5-0.5B's configuration, built locally), with the
inference server running (``VllmManager``, ``--inference-backend hf``) and the trainer's model and AdamW
state in this process:

* ``step``: one optimizer step (forward, backward, clip, AdamW) on ``--batch`` x ``--seq`` random tokens,
  the baseline every figure is divided by;
* ``copy floor``: one copy of the weights into memory already allocated, the least a hand-off between two
  copies of the weights can cost;
* ``checkpoint`` (before): what the trainer did at every refresh, writing the full checkpoint (weights,
  optimizer state, RNG) and waiting for the server's in-place reload of it (``/bridge/update_weights``);
* ``broadcast`` (after, ``--refresh-mode broadcast``): the weights sent over a gloo group into the server,
  waiting until it serves them (``broadcast_sent``: of which, until the weights were sent);
* ``broadcast async`` (after, ``--weight-broadcast-async``): the weights are sent from the parameters
  themselves while the next step computes its gradients, and that step's optimizer update waits until they
  are sent; the time lost is the time ``send`` held the trainer plus how much longer the overlapping step
  took than a step alone;
* ``shared`` (``--weight-bridge-mode shared_vllm``): the trainer's parameters are the server's own tensors,
  so there is no hand-off at all (0 s lost); measured are its steps, against the baseline's.

Every hand-off is checked: the server's logprobs of its greedy continuation of a fixed prompt must equal the
trainer model's (1e-5) afterwards (in ``shared``, after each step, with no call to the server).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from example_trainer.inference.served_logprobs import served_vs_model

PROMPT = [5, 17, 29, 41, 53, 65, 77]
TOLERANCE = 1e-5


def _served_diff(url: str, model: Any) -> float:
    return served_vs_model(url, model, PROMPT, max_tokens=4, timeout=600)[0]


class _Trainer:
    """The trainer's model and AdamW state, and one optimizer step on fixed random tokens."""

    def __init__(self, model: Any, config: Any, batch: int, seq: int) -> None:
        from example_trainer.grpo.model import trainable_parameters
        from example_trainer.grpo.step import create_optimizer

        self.model = model
        self.optimizer = create_optimizer(trainable_parameters(model), config)
        self.ids = torch.randint(5, min(800, model.config.vocab_size), (batch, seq))

    def step(self, before_update: Callable[[], None] = lambda: None) -> float:
        """One optimizer step; ``before_update`` runs where the trainer's optimizer pre-hook does. Seconds."""
        start = time.perf_counter()
        self.model(input_ids=self.ids, labels=self.ids).loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        before_update()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start


def _config(model_dir: Path, work: Path, **kw: Any) -> Any:
    from atroposlib.testing.api_process import free_port
    from example_trainer.grpo.config import TrainingConfig

    return TrainingConfig(
        model_name=str(model_dir), device="cpu", optimizer="adamw", lr=1e-5, train_dtype="float32",
        save_path=str(work / "ckpt"), inference_backend="hf", vllm_port=free_port(),
        log_dir=str(work / "logs"), gradient_checkpointing=False, **kw,
    )  # fmt: skip


def _copy_time(model: Any, repeats: int) -> float:
    """The median seconds of one copy of ``model``'s weights into memory already allocated: the least any
    hand-off between two copies of the weights costs on this machine."""
    from example_trainer.inference.weight_broadcast import unique_named_tensors

    named = unique_named_tensors(model)
    spare = [torch.empty_like(t) for _, t in named]
    for target, (_, t) in zip(spare, named, strict=True):
        target.copy_(t)  # first touch of the new pages, not timed
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for target, (_, t) in zip(spare, named, strict=True):
            target.copy_(t)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _checkpoint(
    trainer: _Trainer, tokenizer: Any, config: Any, url: str, repeats: int, diffs: list[float]
) -> float:
    """The median seconds of a checkpoint written and reloaded by the server."""
    from example_trainer.grpo.checkpointing import save_checkpoint
    from example_trainer.inference.weight_refresh import request_weight_update

    times = []
    for i in range(repeats):
        trainer.step()
        start = time.perf_counter()
        path = save_checkpoint(trainer.model, tokenizer, trainer.optimizer, config, 100 + i)
        request_weight_update(url, path)
        times.append(time.perf_counter() - start)
        diffs.append(_served_diff(url, trainer.model))
    return statistics.median(times)


def _broadcast(trainer: _Trainer, url: str, repeats: int, out: dict[str, Any], diffs: list[float]) -> None:
    """The waiting and the background hand-off, each ``repeats`` times, into ``out``."""
    from example_trainer.inference.weight_broadcast import WeightBroadcaster, unique_named_tensors

    model = trainer.model
    sender = WeightBroadcaster([url])
    try:
        start = time.perf_counter()
        sender.connect()
        out["broadcast_connect_s"] = time.perf_counter() - start
        served, sent = [], []
        for _ in range(repeats):
            trainer.step()
            start = time.perf_counter()
            sender.send(unique_named_tensors(model), wait=False)
            sender.wait_sent()
            sent.append(time.perf_counter() - start)
            sender.wait()
            served.append(time.perf_counter() - start)
            diffs.append(_served_diff(url, model))
        out["broadcast_s"], out["broadcast_sent_s"] = statistics.median(served), statistics.median(sent)
        lost, overlapped = [], []
        for _ in range(repeats):
            trainer.step()
            snapshot = {n: t.detach().clone() for n, t in model.state_dict().items()}
            held = sender.send(unique_named_tensors(model), wait=False)
            next_step = trainer.step(sender.wait_sent)  # overlaps the transfer
            sender.wait()
            overlapped.append(next_step)
            lost.append(held + max(0.0, next_step - out["step_s"]))
            with torch.no_grad():  # check what was sent: the weights before the overlapping step
                current = {n: t.clone() for n, t in model.state_dict().items()}
                model.load_state_dict(snapshot)
                diffs.append(_served_diff(url, model))
                model.load_state_dict(current)
        out["broadcast_async_lost_s"] = statistics.median(lost)
        out["overlapped_step_s"] = statistics.median(overlapped)
    finally:
        sender.close()


def _own_weights(model_dir: Path, work: Path, batch: int, seq: int, repeats: int) -> dict[str, Any]:
    """The baseline step, the checkpoint path and the broadcast, with the trainer's own copy of the weights."""
    from example_trainer.grpo.model import load_model_and_tokenizer
    from example_trainer.inference.vllm_manager import VllmManager

    config = _config(model_dir, work / "own", refresh_mode="broadcast")
    model, tokenizer = load_model_and_tokenizer(config)
    trainer = _Trainer(model, config, batch, seq)
    out: dict[str, Any] = {"parameters": sum(p.numel() for p in model.parameters())}
    diffs: list[float] = []
    with VllmManager(config) as manager:
        manager.start(str(model_dir))
        trainer.step()  # warm-up (allocates the optimizer state)
        out["step_s"] = statistics.median(trainer.step() for _ in range(repeats))
        out["copy_floor_s"] = _copy_time(model, repeats)
        out["checkpoint_s"] = _checkpoint(trainer, tokenizer, config, manager.root_url, repeats, diffs)
        _broadcast(trainer, manager.root_url, repeats, out, diffs)
    out["max_logprob_diff"] = max(diffs)
    return out


def _shared_weights(model_dir: Path, work: Path, batch: int, seq: int, repeats: int) -> dict[str, Any]:
    """``shared_vllm``: steps on the server's own tensors; after each, the server serves them as they are."""
    from example_trainer.grpo.inference_sync import InferenceSync
    from example_trainer.grpo.startup import attach_shared_policy

    config = _config(model_dir, work / "shared", weight_bridge_mode="shared_vllm")
    inference = InferenceSync(config)
    model, _ = attach_shared_policy(config, inference, None)
    try:
        trainer = _Trainer(model, config, batch, seq)
        trainer.step()  # warm-up
        steps, diffs = [], []
        for _ in range(repeats):
            steps.append(trainer.step())
            diffs.append(_served_diff(inference.root_url, model))
    finally:
        inference.stop()
    return {"shared_step_s": statistics.median(steps), "shared_max_logprob_diff": max(diffs)}


def measure_shape(shape: str, work: Path, batch: int, seq: int, repeats: int) -> dict[str, Any]:
    from example_trainer.demo.device_check import DeviceCheckConfig, build_model

    model_dir = build_model(DeviceCheckConfig(device="cpu", shape=shape, sft_steps=0), work / shape / "model")
    out: dict[str, Any] = {"shape": shape, "tokens_per_step": batch * seq}
    out.update(_own_weights(model_dir, work / shape, batch, seq, repeats))
    out.update(_shared_weights(model_dir, work / shape, batch, seq, repeats))
    worst = max(out["max_logprob_diff"], out["shared_max_logprob_diff"])
    assert worst < TOLERANCE, f"served logprobs differ by {worst}"
    out["shared_lost_s"] = 0.0  # nothing is handed off
    keys = (
        "copy_floor_s",
        "checkpoint_s",
        "broadcast_s",
        "broadcast_sent_s",
        "broadcast_async_lost_s",
        "shared_lost_s",
    )
    for key in keys:
        out[key.removesuffix("_s") + "_pct_of_step"] = 100 * out[key] / out["step_s"]
    return out


def run(shapes: list[str], batch: dict[str, int], seq: int, repeats: int) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="weight-handoff-bench-") as tmp:  # GBs of checkpoints
        for shape in shapes:
            print(f"--- {shape}", flush=True)
            results.append(measure_shape(shape, Path(tmp), batch[shape], seq, repeats))
            print(format_row(results[-1]), flush=True)
    return results


def format_row(r: dict[str, Any]) -> str:
    def cost(label: str, key: str) -> str:
        return f"{label} {r[key + '_s']:7.3f} s = {r[key + '_pct_of_step']:6.2f}%"

    return " | ".join([
        f"{r['shape']:<13} {r['parameters'] / 1e6:7.1f} M  step {r['step_s']:7.2f} s ({r['tokens_per_step']} tok)",
        cost("one copy", "copy_floor"),
        cost("checkpoint", "checkpoint"),
        cost("broadcast", "broadcast") + f" (sent after {r['broadcast_sent_s']:.3f} s)",
        cost("async lost", "broadcast_async_lost") + f" (overlapped step {r['overlapped_step_s']:.2f} s)",
        cost("shared_vllm lost", "shared_lost") + f" (its step {r['shared_step_s']:.2f} s)",
        f"checkpoint / broadcast {r['checkpoint_s'] / r['broadcast_s']:5.1f}x",
        f"max |dlogp| {max(r['max_logprob_diff'], r['shared_max_logprob_diff']):.1e}",
    ])  # fmt: skip
