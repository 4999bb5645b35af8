"""``reasoningsteps``: how much visible step-by-step structure a completion has (0..1)."""

from __future__ import annotations

import re
from typing import Any

from .registry import registry
from .reward_function import RewardFunction

DEFAULT_PATTERN_WEIGHTS = {
    "numbered_steps": 0.5,
    "list_numbers": 0.5,
    "bullet_points": 0.4,
    "transition_words": 0.3,
}
STEP_PATTERNS = {
    "numbered_steps": r"Step\s+\d+[\s:]+",
    "list_numbers": r"(?:^|\n)\s*\d+\.\s+",
    "bullet_points": r"(?:^|\n)\s*[\-\*•]\s+",
    "transition_words": (
        r"\b(?:First|Second|Third|Fourth|Fifth|Next|Then|Finally|Subsequently|Afterward|Lastly|Initially|"
        r"To begin|Let's begin|I'll first|After that|In conclusion|Eventually|To solve|begin by|understand|"
        r"analyze|apply|compute)\b"
    ),
}


@registry.register
class ReasoningStepsReward(RewardFunction):
    """Σ over step patterns (``Step N``, numbered lines, bullets, transition words) of
    ``min(1, matches / min_steps) * weight``, plus ``base_score`` for more than ``min_words`` words, capped
    at 1.0. ``pattern_weights`` overrides the default weights (0.5/0.5/0.4/0.3)."""

    def __init__(
        self,
        min_words: int = 10,
        min_steps: int = 3,
        base_score: float = 0.1,
        pattern_weights: dict[str, float] | None = None,
        weight: float = 1.0,
        **kwargs: Any,
    ):
        super().__init__(weight=weight, **kwargs)
        self.min_words = min_words
        self.min_steps = min_steps
        self.base_score = base_score
        self.pattern_weights = {**DEFAULT_PATTERN_WEIGHTS, **(pattern_weights or {})}
        self.patterns = dict(STEP_PATTERNS)
        self._compiled = {k: re.compile(p, re.IGNORECASE | re.MULTILINE) for k, p in self.patterns.items()}

    def score_text(self, content: str) -> float:
        score = 0.0
        for kind, pattern in self._compiled.items():
            matches = len(pattern.findall(content))
            score += min(1.0, matches / max(self.min_steps, 1)) * self.pattern_weights.get(kind, 0.3)
        if len(content.split()) > self.min_words:
            score += self.base_score
        return min(1.0, score)

    def compute(self, completions: list[Any], **kwargs: Any) -> list[float]:
        return [self.score_text(self.get_content(c)) for c in completions]


def reasoning_steps_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """Plain-function form of :class:`ReasoningStepsReward`."""
    return ReasoningStepsReward().compute(completions, **kwargs)
