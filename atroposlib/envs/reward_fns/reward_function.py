"""The base class of every reward function."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Any

logger = logging.getLogger(__name__)


class RewardFunction(ABC):
    """A named, weighted scorer of a batch of completions.

    Subclasses implement :meth:`compute`; calling the instance applies ``weight``, logs metrics to the
    wandb-style logger when one is set, and turns any error into zero rewards (logged), so one broken
    reward never takes an environment down.

    Args:
        weight: multiplier applied by ``__call__`` (and by :class:`CombinedReward` to sub-rewards).
        name: instance name (default: the lower-cased class name).
        **kwargs: kept in ``self.config``.
    """

    def __init__(self, weight: float = 1.0, name: str | None = None, **kwargs: Any):
        self.weight = weight
        self._name = name
        self.config = kwargs
        self.wandb_logger = None

    @property
    def name(self) -> str:
        return self._name or self.__class__.__name__.lower()

    @abstractmethod
    def compute(self, completions: list[Any], **kwargs: Any) -> list[float]:
        """One raw (unweighted) reward per completion. ``kwargs`` carry context such as ``solution``."""

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float]:
        try:
            raw = [float(r) for r in self.compute(completions, **kwargs)]
            if len(raw) != len(completions):
                raise ValueError(f"returned {len(raw)} rewards for {len(completions)} completions")
            weighted = [r * self.weight for r in raw]
            if self.wandb_logger:
                self.log_metrics(raw, weighted)
            return weighted
        except Exception as exc:
            logger.error(
                "reward function %s failed, scoring the batch 0.0: %s", self.name, exc, exc_info=True
            )
            return [0.0] * len(completions)

    def set_wandb_logger(self, logger: Any) -> None:
        """Set the object whose ``log(dict)`` receives this reward's metrics."""
        self.wandb_logger = logger

    def log_metrics(self, raw_rewards: list[float], weighted_rewards: list[float]) -> None:
        """Log ``reward/{name}/mean_raw``, ``mean_weighted``, ``min`` and ``max`` (no-op without a logger)."""
        if not self.wandb_logger or not raw_rewards:
            return
        self.wandb_logger.log(
            {
                f"reward/{self.name}/mean_raw": sum(raw_rewards) / len(raw_rewards),
                f"reward/{self.name}/mean_weighted": sum(weighted_rewards) / len(weighted_rewards),
                f"reward/{self.name}/min": min(raw_rewards),
                f"reward/{self.name}/max": max(raw_rewards),
            }
        )

    @staticmethod
    def get_content(completion: Any) -> str:
        """The assistant text of a completion in any of the usual shapes.

        Accepts a string, an assistant message ``{"role": "assistant", "content": ...}``, a choice-like
        ``{"message": {...}}``, or a list of messages (the first assistant message wins). Anything else
        gives ``""``.
        """
        if isinstance(completion, str):
            return completion
        if isinstance(completion, dict):
            if completion.get("role") == "assistant" and "content" in completion:
                return completion["content"] or ""
            message = completion.get("message")
            if isinstance(message, dict) and message.get("role") == "assistant" and "content" in message:
                return message["content"] or ""
            return ""
        if isinstance(completion, list):
            for message in completion:
                if isinstance(message, dict) and message.get("role") == "assistant" and "content" in message:
                    return message["content"] or ""
        return ""
