"""``format``: 1.0 when a completion contains the expected XML-style tag pairs."""

from __future__ import annotations

import re
from typing import Any

from .registry import registry
from .reward_function import RewardFunction


@registry.register
class FormatReward(RewardFunction):
    """1.0 if any (or, with ``require_all_tags``, every) ``<tag>...</tag>`` of ``preferred_tags``
    (default ``["think", "answer"]``) occurs; case-insensitive unless ``case_sensitive``."""

    def __init__(
        self,
        preferred_tags: list[str] | None = None,
        require_all_tags: bool = False,
        case_sensitive: bool = False,
        weight: float = 1.0,
        **kwargs: Any,
    ):
        super().__init__(weight=weight, **kwargs)
        self.preferred_tags = preferred_tags or ["think", "answer"]
        self.require_all_tags = require_all_tags
        self.case_sensitive = case_sensitive
        flags = re.DOTALL | (0 if case_sensitive else re.IGNORECASE)
        self._patterns = [
            re.compile(f"<{re.escape(t)}>.*?</{re.escape(t)}>", flags) for t in self.preferred_tags
        ]

    def compute(self, completions: list[Any], **kwargs: Any) -> list[float]:
        check = all if self.require_all_tags else any
        return [
            1.0 if check(p.search(content) for p in self._patterns) else 0.0
            for content in (self.get_content(c) for c in completions)
        ]


def format_reward(
    completions: list[Any], preferred_tags: list[str] | None = None, **kwargs: Any
) -> list[float]:
    """Plain-function form of :class:`FormatReward`."""
    return FormatReward(preferred_tags=preferred_tags).compute(completions, **kwargs)
