"""``combined``: a weighted sum of several reward functions, optionally normalised."""

from __future__ import annotations

import logging
from typing import Any

from .registry import registry
from .reward_function import RewardFunction

logger = logging.getLogger(__name__)

NORMALIZATIONS = ("none", "sum", "minmax")


@registry.register
class CombinedReward(RewardFunction):
    """Sum of the sub-rewards, each multiplied by its own ``weight``.

    ``rewards`` lists names or config dicts (``{"type": ..., "weight": ..., "params": {...}}``).
    ``normalization``: ``"none"``; ``"sum"`` divides by the sum of the sub-weights (a weighted mean);
    ``"minmax"`` rescales the batch to [0, 1] (unchanged when all values are equal). A failing sub-reward
    contributes 0 (and is logged). The name is ``combined(a,b,...)``.

    Raises:
        ValueError: unknown ``normalization``.
    """

    def __init__(
        self, rewards: list[str | dict], normalization: str = "none", weight: float = 1.0, **kwargs: Any
    ):
        super().__init__(weight=weight, **kwargs)
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
        self.normalization = normalization
        self.reward_functions: list[RewardFunction] = [registry.create(r) for r in rewards]

    @property
    def name(self) -> str:
        return self._name or f"combined({','.join(r.name for r in self.reward_functions)})"

    def set_wandb_logger(self, logger: Any) -> None:
        super().set_wandb_logger(logger)
        for reward_fn in self.reward_functions:
            reward_fn.set_wandb_logger(logger)

    def compute(self, completions: list[Any], **kwargs: Any) -> list[float]:
        if not completions:
            return []
        total = [0.0] * len(completions)
        for reward_fn in self.reward_functions:
            # Calling the sub-reward applies its weight, logs its metrics and turns its errors into zeros.
            for i, value in enumerate(reward_fn(completions, **kwargs)):
                total[i] += value
        if self.normalization == "sum":
            weight_sum = sum(r.weight for r in self.reward_functions)
            if weight_sum > 0:
                total = [v / weight_sum for v in total]
        elif self.normalization == "minmax":
            low, high = min(total), max(total)
            if high > low:
                total = [(v - low) / (high - low) for v in total]
        return total
