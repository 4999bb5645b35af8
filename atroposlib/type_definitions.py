"""Shared type aliases and TypedDicts used by environments (names kept from atroposlib 0.4.0)."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from openai.types.chat import ChatCompletionContentPartParam
from typing_extensions import TypedDict

Content = Union[str, list[ChatCompletionContentPartParam]]
Item = Any
number = Union[int, float]
UUID = str


class Message(TypedDict):
    role: Literal["system", "user", "assistant", "tool"]
    content: Content
    reward: Optional[float]


class AgentStep(TypedDict, total=False):
    step: int
    messages: list[Message]
    reward: float


AgentHistory = dict[str, list[AgentStep]]


class Observation(TypedDict):
    raw: dict[str, Any]
    rendered: Content


class GameStep(TypedDict):
    step: int
    agent_id: str
    observation: Observation
    action: str
    reward: Union[float, dict[str, float]]
    done: bool
    info: dict[str, Any]


GameHistory = list[GameStep]


class EvaluationConfigGeneral(TypedDict):
    total_evaluation_time_seconds: str
    model_name: Optional[str]
    generation_parameters: dict[str, Any]


class EvaluationResults(TypedDict):
    all: dict[str, float]


class EvaluationMetrics(TypedDict):
    config_general: EvaluationConfigGeneral
    results: EvaluationResults


class EvaluationSample(TypedDict, total=False):
    messages: list[Message]
    question: str
    gold_answer: str
    gold_parsed: str
    model_parsed: str
    score: Optional[int]
    correct: Optional[bool]
    finish_reason: str
    response_after_think: str
