"""The trainer's public entry points, one per weight-bridge mode: each checks the mode and runs :func:`train`.

``example_trainer.trainers`` is this module (it also re-exports :func:`train` and its types).
"""

from __future__ import annotations

from typing import Any

from example_trainer.grpo import loop as _loop
from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.inference_sync import remote_inference_urls
from example_trainer.grpo.loop import (
    EvalHook,
    TrainingResult,
    staleness_record,
    train,
)


def _require_mode(config: TrainingConfig, modes: tuple[str, ...], fn: str) -> None:
    if config.weight_bridge_mode not in modes:
        raise ValueError(f"{fn} needs weight_bridge_mode in {modes}, got {config.weight_bridge_mode!r}")


def train_legacy(config: TrainingConfig, eval_hook: EvalHook | None = None, **kwargs: Any) -> TrainingResult:
    """Mode ``none``: full-model training; vLLM restarted (or reloaded) on each new checkpoint."""
    _require_mode(config, ("none",), "train_legacy")
    return train(config, eval_hook, **kwargs)


def train_lora(config: TrainingConfig, eval_hook: EvalHook | None = None, **kwargs: Any) -> TrainingResult:
    """Mode ``lora_only``: LoRA adapters hot-swapped into a running vLLM (``--enable-lora``)."""
    _require_mode(config, ("lora_only",), "train_lora")
    return train(config, eval_hook, **kwargs)


def train_lora_restart(
    config: TrainingConfig, eval_hook: EvalHook | None = None, **kwargs: Any
) -> TrainingResult:
    """Mode ``lora_restart``: LoRA adapters; vLLM restarted with each new adapter."""
    _require_mode(config, ("lora_restart",), "train_lora_restart")
    return train(config, eval_hook, **kwargs)


def train_shared_vllm(
    config: TrainingConfig, eval_hook: EvalHook | None = None, **kwargs: Any
) -> TrainingResult:
    """Mode ``shared_vllm``: the trainer trains the local inference server's own weights in place (one copy;
    generation sees every optimizer step without a refresh)."""
    _require_mode(config, ("shared_vllm",), "train_shared_vllm")
    return train(config, eval_hook, **kwargs)


__all__ = [  # the loop's names, re-exported, and the mode entry points
    *_loop.__all__,
    "remote_inference_urls",
    "staleness_record",
    "train_legacy",
    "train_lora",
    "train_lora_restart",
    "train_shared_vllm",
]
