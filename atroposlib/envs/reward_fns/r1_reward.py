"""R1-style rewards: ``formatreasoning`` (one think block + an answer), ``accuracyx`` (solution contained
in the answer) and ``r1`` (their weighted sum)."""

from __future__ import annotations

import logging
import re
from typing import Any

from .registry import registry
from .reward_function import RewardFunction

logger = logging.getLogger(__name__)

THINK_BLOCK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)
THINK_SPLIT_RE = re.compile(r"<think>\s*(.*?)\s*</think>\s*(.*)", re.DOTALL)


def parse_reasoning_response(text: Any) -> dict[str, Any]:
    """Split text into ``thinking_content`` and ``response`` (after ``</think>``), both stripped.

    ``multiple_thinking`` is True (and nothing is split) when there is more than one think block; without
    a block the whole text is the response.
    """
    if not isinstance(text, str):
        return {"thinking_content": "", "response": str(text), "multiple_thinking": False}
    if len(THINK_BLOCK_RE.findall(text)) > 1:
        return {"thinking_content": "", "response": text, "multiple_thinking": True}
    match = THINK_SPLIT_RE.search(text)
    if not match:
        return {"thinking_content": "", "response": text, "multiple_thinking": False}
    return {
        "thinking_content": match.group(1).strip(),
        "response": match.group(2).strip(),
        "multiple_thinking": False,
    }


@registry.register
class FormatReasoningReward(RewardFunction):
    """``reward_value`` when a completion has non-empty thinking in one ``<think>`` block (as required)
    followed by a non-empty response, else 0."""

    def __init__(
        self,
        reward_value: float = 0.5,
        require_thinking: bool = True,
        require_response: bool = True,
        allow_multiple_thinking: bool = False,
        weight: float = 1.0,
        **kwargs: Any,
    ):
        super().__init__(weight=weight, **kwargs)
        self.reward_value = reward_value
        self.require_thinking = require_thinking
        self.require_response = require_response
        self.allow_multiple_thinking = allow_multiple_thinking

    def compute(self, completions: list[Any], **kwargs: Any) -> list[float]:
        rewards = []
        for completion in completions:
            parsed = parse_reasoning_response(self.get_content(completion))
            ok = (
                (not self.require_thinking or bool(parsed["thinking_content"]))
                and (not self.require_response or bool(parsed["response"]))
                and (self.allow_multiple_thinking or not parsed["multiple_thinking"])
            )
            rewards.append(self.reward_value if ok else 0.0)
        return rewards


@registry.register
class AccuracyXReward(RewardFunction):
    """``reward_value`` when the solution string is contained in (or, with ``exact_match``, equals) the
    response after the think block; case-insensitive unless ``case_sensitive``."""

    def __init__(
        self,
        exact_match: bool = False,
        case_sensitive: bool = False,
        reward_value: float = 1.0,
        weight: float = 1.0,
        **kwargs: Any,
    ):
        super().__init__(weight=weight, **kwargs)
        self.exact_match = exact_match
        self.case_sensitive = case_sensitive
        self.reward_value = reward_value

    def compute(self, completions: list[Any], solution: Any = None, **kwargs: Any) -> list[float]:
        if solution is None:
            logger.warning("accuracyx reward: no solution given; scoring 0.0")
            return [0.0] * len(completions)
        solutions = solution if isinstance(solution, list) else [solution] * len(completions)
        rewards = []
        for i, completion in enumerate(completions):
            if i >= len(solutions):
                rewards.append(0.0)
                continue
            sol = solutions[i]
            expected = sol if isinstance(sol, str) else self.get_content(sol) or str(sol)
            response = parse_reasoning_response(self.get_content(completion))["response"]
            if not self.case_sensitive:
                expected, response = expected.lower(), response.lower()
            match = response == expected if self.exact_match else expected in response
            rewards.append(self.reward_value if match else 0.0)
        return rewards


@registry.register
class R1Reward(RewardFunction):
    """``format_weight * formatreasoning + accuracy_weight * accuracyx`` (both components scored 0/1)."""

    def __init__(
        self, format_weight: float = 0.5, accuracy_weight: float = 1.0, weight: float = 1.0, **kwargs: Any
    ):
        super().__init__(weight=weight, **kwargs)
        self.format_weight = format_weight
        self.accuracy_weight = accuracy_weight
        self.format_reward_fn = FormatReasoningReward(reward_value=1.0)
        self.accuracy_reward_fn = AccuracyXReward(reward_value=1.0)

    def compute(self, completions: list[Any], solution: Any = None, **kwargs: Any) -> list[float]:
        fmt = self.format_reward_fn.compute(completions, **kwargs)
        acc = self.accuracy_reward_fn.compute(completions, solution=solution, **kwargs)
        return [f * self.format_weight + a * self.accuracy_weight for f, a in zip(fmt, acc, strict=False)]


def format_reasoning_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """Plain-function form of :class:`FormatReasoningReward` (reward 0.5)."""
    return FormatReasoningReward(reward_value=0.5).compute(completions, **kwargs)


def accuracy_reward(completions: list[Any], solution: Any, **kwargs: Any) -> list[float]:
    """Plain-function form of :class:`AccuracyXReward`."""
    return AccuracyXReward().compute(completions, solution=solution, **kwargs)


def r1_reward(completions: list[Any], solution: Any, **kwargs: Any) -> list[float]:
    """Plain-function form of :class:`R1Reward`."""
    return R1Reward().compute(completions, solution=solution, **kwargs)
