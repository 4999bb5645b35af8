"""The data an environment produces: scored groups and single scored rollouts.

These are ``TypedDict`` s: plain ``dict`` s at runtime, subclassable, tolerant of extra keys, exactly as
environments written for atroposlib 0.4.0 expect. :mod:`atroposlib.envs.base` re-exports them.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from typing_extensions import TypedDict

from atroposlib.type_definitions import Message


class ScoredDataGroup(TypedDict, total=False):
    """One prompt's group of scored sequences, as sent to ``POST /scored_data``.

    ``tokens`` / ``masks`` / ``scores`` are required by the API; every other key is optional.
    ``masks`` holds ``-100`` at positions that are not trained and the token id at trained ones.
    ``inference_logprobs`` is aligned with ``tokens`` (``1.0`` at masked prompt positions).
    """

    tokens: list[list[int]]
    masks: list[list[int]]
    scores: list[float]
    advantages: list[list[float]] | None
    ref_logprobs: list[list[float]] | None
    messages: list[list[Message]] | None
    generation_params: dict[str, Any] | None
    inference_logprobs: list[list[float]] | None
    group_overrides: dict | None
    overrides: list[dict] | None
    images: Any | None
    distill_token_ids: list[list[list[int]]] | None
    distill_logprobs: list[list[list[float]]] | None


class ScoredDataItem(TypedDict, total=False):
    """One scored rollout (the unit returned by ``collect_trajectory``). Extra keys are tolerated."""

    tokens: list[int]
    masks: list[int]
    scores: float
    advantages: list[float] | None
    ref_logprobs: list[float] | None
    messages: list[Message] | None
    group_overrides: dict | None
    overrides: dict | None
    images: Any | None
    inference_logprobs: list[float] | None
    distill_token_ids: list[list[int]] | None
    distill_logprobs: list[list[float]] | None


class EvalHandlingEnum(Enum):
    """What happens to training workers while an evaluation runs."""

    STOP_TRAIN = "STOP_TRAIN"  # cancel (and re-queue) training work during eval
    LIMIT_TRAIN = "LIMIT_TRAIN"  # cap training workers at max_num_workers * eval_limit_ratio
    NONE = "NONE"  # no change
