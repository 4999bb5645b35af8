"""Supervised warm start: teach a (tiny) model the demo task's answer format before GRPO.

A freshly initialised model never produces a correct answer, so GRPO would see only zero rewards.
A short supervised phase on problems from the task's training split (:meth:`DemoTask.sft_examples
<example_trainer.demo.task.DemoTask.sft_examples>`: the same prompts, chat template and answer format the environment rewards) makes it partially
competent; GRPO then has something to reinforce.

The result is a normal Hugging Face model directory, cached under ``cache_dir`` in a folder named by
a hash of everything that determines it (base model, task settings, SFT settings), so a second run
with the same settings loads it instead of training again. Training is seeded and deterministic on a
given machine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from example_trainer.demo.arithmetic_task import as_demo_task
from example_trainer.demo.heldout_eval import chat_prompt_ids, load_causal_lm
from example_trainer.demo.task import DemoTask

logger = logging.getLogger(__name__)

#: Bump when the training procedure changes, so stale cache entries are not reused.
SFT_VERSION = 2
IGNORE_INDEX = -100
#: Files identifying the base model in the cache key (contents hashed when present).
_IDENTITY_FILES = ("config.json", "atropos_tiny_spec.json", "tokenizer.json")


class SftSettings(BaseModel):
    """Settings of the supervised warm start (names match the demo's ``--sft-*`` flags)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(500, ge=0, description="optimizer steps (0: no warm start)")
    batch_size: int = Field(64, ge=1, description="examples per step")
    lr: float = Field(1e-3, gt=0, description="learning rate after the warmup (then constant)")
    warmup_steps: int = Field(100, ge=0, description="linear warmup steps")
    weight_decay: float = Field(0.0, ge=0)
    seed: int = Field(0, description="torch seed of the run")


def encode_example(
    tokenizer: Any, messages: Sequence[Mapping[str, str]], answer: str
) -> tuple[list[int], list[int]]:
    """Token ids of prompt + answer + EOS, and labels that train only the answer and the EOS."""
    prompt = chat_prompt_ids(tokenizer, messages)
    reply = list(tokenizer(answer, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]
    return prompt + reply, [IGNORE_INDEX] * len(prompt) + reply


def collate(
    encoded: Sequence[tuple[list[int], list[int]]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad examples into ``input_ids``, ``attention_mask`` and ``labels`` tensors."""
    width = max(len(ids) for ids, _ in encoded)
    input_ids = torch.full((len(encoded), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(encoded), width), dtype=torch.long)
    labels = torch.full((len(encoded), width), IGNORE_INDEX, dtype=torch.long)
    for row, (ids, labs) in enumerate(encoded):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        labels[row, : len(labs)] = torch.tensor(labs)
    return input_ids, attention, labels


def lr_factor(step: int, settings: SftSettings) -> float:
    """Multiplier of ``settings.lr`` at 0-based ``step``: linear warmup, then constant."""
    if settings.warmup_steps and step < settings.warmup_steps:
        return (step + 1) / settings.warmup_steps
    return 1.0


def train_sft(
    model: Any,
    tokenizer: Any,
    task: DemoTask | Mapping[str, Any],
    settings: SftSettings,
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Train ``model`` in place on ``settings.steps * settings.batch_size`` distinct training problems.

    The examples come from ``task``'s training split (its held-out items are never trained on).
    ``on_step(step, loss)`` is called after each optimizer step. Returns the step losses.
    """
    torch.manual_seed(settings.seed)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    examples = as_demo_task(task).sft_examples(settings.steps * settings.batch_size)
    losses: list[float] = []
    for step in range(settings.steps):
        batch = [encode_example(tokenizer, m, a) for m, a in _take(examples, settings.batch_size)]
        input_ids, attention, labels = collate(batch, pad_id)
        for group in optimizer.param_groups:
            group["lr"] = settings.lr * lr_factor(step, settings)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(step, losses[-1])
    model.eval()
    return losses


def _take(iterator: Any, n: int) -> list[Any]:
    return [next(iterator) for _ in range(n)]


def cache_key(base_model: str | Path, task_settings: Mapping[str, Any], settings: SftSettings) -> str:
    """Short hash of the base model's identity files, the task settings and the SFT settings."""
    digest = hashlib.sha256()
    base = Path(base_model)
    digest.update(base.resolve().name.encode())
    for name in _IDENTITY_FILES:
        path = base / name
        if path.is_file():
            digest.update(name.encode() + path.read_bytes())
    blob = {"task": dict(task_settings), "sft": settings.model_dump(), "v": SFT_VERSION}
    digest.update(json.dumps(blob, sort_keys=True, default=list).encode())
    return digest.hexdigest()[:12]


def warm_start(
    base_model: str | Path,
    task: DemoTask | Mapping[str, Any],
    settings: SftSettings,
    cache_dir: str | Path,
    *,
    force: bool = False,
    on_step: Callable[[int, float], None] | None = None,
) -> tuple[Path, bool]:
    """Return ``(model_dir, from_cache)``: the warm-started model, trained now or loaded from the cache.

    The directory is ``<cache_dir>/sft-<cache_key>`` and is written atomically (a temporary folder,
    then a rename), so an interrupted run never leaves a half-written cache entry; of two runs training the
    same entry at once, the second to finish keeps the first one's (which may be in use) and returns it. With
    ``settings.steps == 0`` the base model's directory is returned unchanged.
    """
    if settings.steps == 0:
        return Path(base_model), True
    task = as_demo_task(task)
    root = Path(cache_dir)
    target = root / f"sft-{cache_key(base_model, task.settings, settings)}"
    if (target / "model.safetensors").is_file() and not force:
        return target, True
    root.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_causal_lm(base_model)
    losses = train_sft(model, tokenizer, task, settings, on_step=on_step)
    tmp = Path(tempfile.mkdtemp(prefix=".sft-", dir=root))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        meta = {
            "base_model": str(base_model),
            "task": dict(task.settings),
            "sft": settings.model_dump(),
            "final_loss": losses[-1] if losses else None,
        }
        (tmp / "atropos_sft.json").write_text(json.dumps(meta, indent=2, default=list))
        if (target / "model.safetensors").is_file() and not force:
            # Another run with the same settings saved it meanwhile (and may be reading it): keep that one.
            return target, True
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("warm-started model saved to %s (final loss %.4f)", target, losses[-1] if losses else 0.0)
    return target, False
