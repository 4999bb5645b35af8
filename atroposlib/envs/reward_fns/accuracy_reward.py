"""``accuracy``: 1.0 when a completion's final answer matches the ground truth (math_verify)."""

from __future__ import annotations

import logging
from typing import Any

from ._answer_checking import answer_part, verify_answer
from .registry import registry
from .reward_function import RewardFunction

logger = logging.getLogger(__name__)


@registry.register
class AccuracyReward(RewardFunction):
    """1.0 if the answer part of a completion verifies against the gold answer, else 0.0.

    The answer part is the text after the last ``</think>`` (with ``split_on_think_tag``). The gold comes
    from ``ground_truth`` (preferred) or ``solution``: one value for all completions or one per completion;
    GSM8K ``####`` solutions are reduced to their final answer. A completion with more than
    ``max_boxed_threshold`` ``\\boxed`` after ``</think>`` scores 0 (answer spraying); no gold scores 0.
    """

    def __init__(
        self,
        tolerance: float = 1e-6,
        split_on_think_tag: bool = True,
        max_boxed_threshold: int = 6,
        weight: float = 1.0,
        **kwargs: Any,
    ):
        super().__init__(weight=weight, **kwargs)
        self.tolerance = tolerance
        self.split_on_think_tag = split_on_think_tag
        self.max_boxed_threshold = max_boxed_threshold

    def compute(
        self,
        completions: list[Any],
        solution: Any = None,
        ground_truth: Any = None,
        **kwargs: Any,
    ) -> list[float]:
        gold = ground_truth if ground_truth is not None else solution
        if gold is None:
            logger.warning("accuracy reward: no solution or ground_truth given; scoring 0.0")
            return [0.0] * len(completions)
        golds = gold if isinstance(gold, list) else [gold] * len(completions)
        if len(golds) != len(completions):
            logger.warning(
                "accuracy reward: %d gold answers for %d completions; missing ones score 0.0",
                len(golds),
                len(completions),
            )
        rewards = []
        for i, completion in enumerate(completions):
            if i >= len(golds) or golds[i] is None:
                rewards.append(0.0)
                continue
            rewards.append(self._score(self.get_content(completion), golds[i]))
        return rewards

    def _score(self, content: str, gold: Any) -> float:
        try:
            if self.split_on_think_tag and "</think>" in content:
                tail = content.split("</think>")[-1]
                if tail.count("\\boxed") > self.max_boxed_threshold:
                    logger.info(
                        "accuracy reward: more than %d \\boxed answers; scoring 0.0", self.max_boxed_threshold
                    )
                    return 0.0
            return float(verify_answer(answer_part(content, self.split_on_think_tag), gold, self.tolerance))
        except Exception as exc:
            logger.warning("accuracy reward: could not score a completion: %s", exc)
            return 0.0


def accuracy_reward(
    completions: list[Any], solution: Any = None, ground_truth: Any = None, **kwargs: Any
) -> list[float]:
    """Plain-function form of :class:`AccuracyReward` with default settings."""
    return AccuracyReward().compute(completions, solution=solution, ground_truth=ground_truth, **kwargs)
