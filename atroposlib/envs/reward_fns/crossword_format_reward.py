"""``crosswordformat``: crossword answers written as ``N-Across: WORD`` / ``N-Down: WORD``."""

from __future__ import annotations

import re
from typing import Any

from .registry import registry
from .reward_function import RewardFunction

DEFAULT_FORMAT_PATTERNS = (
    re.compile(r"\d+-(?:Across|Down):\s+[A-Z\s]+", re.IGNORECASE),
    re.compile(r"^(?:\d+-(?:Across|Down):\s+[A-Z\s]+[\s,]*)+$", re.IGNORECASE),
)
ANSWER_RE = re.compile(r"(?:Across|Down):\s+(\S+)", re.IGNORECASE)


@registry.register
class CrosswordFormatReward(RewardFunction):
    """``reward_value`` when the text matches one of ``format_patterns`` and (with
    ``penalize_invalid_chars``) every answer uses only ``valid_chars`` (A-Z by default, case-insensitive);
    else 0."""

    def __init__(
        self,
        format_patterns: list[re.Pattern | str] | None = None,
        reward_value: float = 1.0,
        penalize_invalid_chars: bool = True,
        valid_chars: str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        weight: float = 1.0,
        **kwargs: Any,
    ):
        super().__init__(weight=weight, **kwargs)
        self.reward_value = reward_value
        self.penalize_invalid_chars = penalize_invalid_chars
        self.valid_chars = valid_chars.upper()
        patterns = format_patterns or list(DEFAULT_FORMAT_PATTERNS)
        self.format_patterns = [re.compile(p, re.IGNORECASE) if isinstance(p, str) else p for p in patterns]

    def score_text(self, content: str) -> float:
        if not any(p.search(content) for p in self.format_patterns):
            return 0.0
        if self.penalize_invalid_chars:
            for answer in ANSWER_RE.findall(content):
                answer = answer.rstrip(",;")
                if not all(ch.upper() in self.valid_chars for ch in answer):
                    return 0.0
        return self.reward_value

    def compute(self, completions: list[Any], **kwargs: Any) -> list[float]:
        return [self.score_text(self.get_content(c)) for c in completions]


def crossword_format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """Plain-function form of :class:`CrosswordFormatReward`."""
    return CrosswordFormatReward().compute(completions, **kwargs)
