"""Example GRPO trainer for Atropos.

``TrainingConfig``, ``parse_args`` and ``config_from_args`` import without torch; the ``train_*``
functions (which need the ``trainer`` extra) are imported on first use.
"""

from __future__ import annotations

from typing import Any

from example_trainer.grpo.cli import config_from_args, parse_args
from example_trainer.grpo.config import TrainingConfig

_LAZY = {"train", "train_legacy", "train_lora", "train_lora_restart", "train_shared_vllm", "TrainingResult"}

__all__ = [
    "TrainingConfig",
    "TrainingResult",
    "config_from_args",
    "parse_args",
    "train",
    "train_legacy",
    "train_lora",
    "train_lora_restart",
    "train_shared_vllm",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from example_trainer.grpo import modes as trainers

        return getattr(trainers, name)
    raise AttributeError(f"module 'example_trainer' has no attribute {name!r}")
