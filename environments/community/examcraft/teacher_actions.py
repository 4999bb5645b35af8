"""The teacher's move: one JSON object (optionally in a ```json fence) after the reasoning, checked.

``{"action_type": "QUESTION" | "EXPLANATION" | "LESSON_PLAN", "topic": ..., "difficulty": "easy" | "medium" |
"hard", "content": {...}}``. A question needs ``content.question``, ``content.options`` with exactly the keys
``A``-``D`` holding four different non-empty texts, and ``content.correct_answer`` one of them; an explanation
needs a non-empty ``content.explanation``; a lesson plan needs ``content.prioritized_topics``, a non-empty list
of the student's topics without repeats. Topics must be the student's; key order and the case of
``action_type``, ``topic`` and ``difficulty`` do not matter. Anything else (prose around the object, two
objects, the object only inside ``<think>``) raises :class:`~atroposlib.envs.games.InvalidAction`.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Optional

from atroposlib.envs.games import InvalidAction
from atroposlib.utils.replies import answer_section
from atroposlib.utils.tool_calls import ToolCallError, load_json

KINDS = ("QUESTION", "EXPLANATION", "LESSON_PLAN")
DIFFICULTIES = ("easy", "medium", "hard")
OPTION_KEYS = ("A", "B", "C", "D")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


@dataclass(frozen=True)
class TeacherAction:
    """A checked move: its ``kind`` (one of :data:`KINDS`), ``topic`` (None for a lesson plan),
    ``difficulty`` (questions only) and ``content``; ``plan`` lists a lesson plan's topics in order."""

    kind: str
    topic: Optional[str]
    difficulty: Optional[str]
    content: dict[str, Any]
    plan: tuple[str, ...] = ()


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _topic(action: dict[str, Any], topics: Collection[str]) -> str:
    topic = _text(action.get("topic")).lower()
    if topic not in topics:
        raise InvalidAction(f"'topic' must be one of the student's topics ({', '.join(sorted(topics))})")
    return topic


def _check_question(content: dict[str, Any]) -> None:
    if not _text(content.get("question")):
        raise InvalidAction("a QUESTION needs the question text in content.question")
    options = content.get("options")
    if not isinstance(options, dict) or sorted(options) != list(OPTION_KEYS):
        raise InvalidAction("a QUESTION needs content.options with exactly the keys A, B, C and D")
    texts = [_text(options[key]).lower() for key in OPTION_KEYS]
    if not all(texts) or len(set(texts)) != len(texts):
        raise InvalidAction("the four options must be different non-empty texts")
    if _text(content.get("correct_answer")).upper() not in OPTION_KEYS:
        raise InvalidAction("content.correct_answer must be one of A, B, C, D")


def _plan(content: dict[str, Any], topics: Collection[str]) -> tuple[str, ...]:
    plan = content.get("prioritized_topics")
    if not isinstance(plan, list) or not plan:
        raise InvalidAction("a LESSON_PLAN needs content.prioritized_topics, a list of topics")
    names = tuple(_text(topic).lower() for topic in plan)
    if any(name not in topics for name in names) or len(set(names)) != len(names):
        raise InvalidAction("prioritized_topics must list the student's topics, each once")
    return names


def parse_object(reply: str) -> dict[str, Any]:
    """The one JSON object a reply's answer part consists of; :class:`InvalidAction` otherwise."""
    section = answer_section(reply)
    if section is None:
        raise InvalidAction("the <think> block is malformed")
    text = section.strip()
    fenced = _FENCE.match(text)
    try:
        action = load_json(fenced.group(1) if fenced else text)
    except ToolCallError as exc:
        raise InvalidAction(f"the reply must be one JSON object: {exc}") from None
    if not isinstance(action, dict):
        raise InvalidAction("the reply must be one JSON object")
    return action


def read_action(reply: str, topics: Collection[str], lesson_plans: bool = True) -> TeacherAction:
    """The checked move of ``reply`` for a student of ``topics`` (see the module docstring);
    ``lesson_plans`` False makes a LESSON_PLAN invalid."""
    action = parse_object(reply)
    kind = _text(action.get("action_type")).upper()
    content = action.get("content")
    if kind not in KINDS or (kind == "LESSON_PLAN" and not lesson_plans):
        allowed = KINDS if lesson_plans else KINDS[:2]
        raise InvalidAction(f"'action_type' must be one of {', '.join(allowed)}")
    if not isinstance(content, dict):
        raise InvalidAction("'content' must be an object")
    if kind == "LESSON_PLAN":
        return TeacherAction(kind, None, None, content, _plan(content, topics))
    topic = _topic(action, topics)
    if kind == "EXPLANATION":
        if not _text(content.get("explanation")):
            raise InvalidAction("an EXPLANATION needs the text in content.explanation")
        return TeacherAction(kind, topic, None, content)
    difficulty = _text(action.get("difficulty")).lower()
    if difficulty not in DIFFICULTIES:
        raise InvalidAction("a QUESTION needs 'difficulty': easy, medium or hard")
    _check_question(content)
    return TeacherAction(kind, topic, difficulty, content)
