"""``cascading_r1_math``: math accuracy plus a 0.5 format bonus that only a correct answer earns."""

from __future__ import annotations

import logging
import re
from typing import Any

from ._answer_checking import answer_part, verify_answer

logger = logging.getLogger(__name__)

THINK_FORMAT_RE = re.compile(r"^<think>[^<]*</think>[^<]*$", re.DOTALL)
MAX_BOXED = 6


def get_completion_content(completion: Any) -> str:
    """Text of a completion given as a string, a message dict, a ``{"message": ...}`` dict or a list of
    messages (the first one)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        if "content" in completion:
            return completion["content"] or ""
        message = completion.get("message")
        if isinstance(message, dict):
            return message.get("content", "") or ""
    if isinstance(completion, list) and completion and isinstance(completion[0], dict):
        return completion[0].get("content", "") or ""
    logger.warning("could not extract content from completion of type %s", type(completion).__name__)
    return str(completion)


def format_reward(completions: list[Any], reward_value: float = 0.5, **kwargs: Any) -> list[float]:
    """``reward_value`` for text shaped exactly ``<think>...</think>answer`` (no other tags), else 0."""
    return [reward_value if THINK_FORMAT_RE.match(get_completion_content(c)) else 0.0 for c in completions]


def accuracy_reward(completions: list[Any], solution: Any, **kwargs: Any) -> list[float]:
    """1.0 when the text after the last ``</think>`` verifies against ``solution`` (scalar or per item)."""
    solutions = solution if isinstance(solution, list) else [solution] * len(completions)
    rewards = []
    for completion, gold in zip(completions, solutions, strict=False):
        content = get_completion_content(completion)
        if "</think>" in content and content.split("</think>")[-1].count("\\boxed") > MAX_BOXED:
            rewards.append(0.0)
            continue
        try:
            rewards.append(float(verify_answer(answer_part(content), gold)))
        except Exception as exc:
            logger.warning("cascading_r1_math: could not score a completion: %s", exc)
            rewards.append(0.0)
    rewards.extend([0.0] * (len(completions) - len(rewards)))
    return rewards


def cascading_r1_math_reward(completions: list[Any], solution: Any, **kwargs: Any) -> list[float]:
    """Accuracy (0/1) plus the format bonus, the bonus counting only when the answer is correct."""
    accuracy = accuracy_reward(completions, solution, **kwargs)
    fmt = format_reward(completions)
    return [a + (f if a > 0 else 0.0) for a, f in zip(accuracy, fmt, strict=False)]
