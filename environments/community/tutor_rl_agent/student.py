"""The simulated student: a profile of topic proficiencies, answers drawn from them, and learning.

Profiles use the original's JSON schema: ``{"current_avg_score": 0-100, "topics": [{"name": ...,
"proficiency": 0-1}, ...]}``; without one, a seeded profile of the original's three topics (``vectors``,
``matrices``, ``linear_systems``) with proficiencies drawn from 0.2 to 0.8.

A question of difficulty ``easy`` / ``medium`` / ``hard`` (levels 0.3 / 0.6 / 0.9) is answered correctly with
probability ``proficiency + 0.3 / 0 / -0.2`` (clamped to 0.1-0.9, as in the original). Learning: a question
teaches most when its level matches the student's proficiency: the topic gains ``question_gain`` x
``max(0, 1 - 2 |level - proficiency|)`` (half of it after a wrong answer); a lesson gains ``lesson_gain`` x
``(1 - proficiency)``. Proficiencies stay within 0-1.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from atroposlib.envs.data_loading import DatasetError

TOPICS = ("vectors", "matrices", "linear_systems")
LEVELS = {"easy": 0.3, "medium": 0.6, "hard": 0.9}
ANSWER_SHIFT = {"easy": 0.3, "medium": 0.0, "hard": -0.2}


def load_profile(path: str | Path) -> dict[str, float]:
    """Topic proficiencies of a profile file in the original's schema; :class:`DatasetError` naming the file
    and the field."""
    try:
        profile = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read the student profile ({exc})") from None
    topics = profile.get("topics") if isinstance(profile, dict) else None
    if not isinstance(topics, list) or not topics:
        raise DatasetError(f"{path}: missing field 'topics'")
    proficiencies = {}
    for index, topic in enumerate(topics):
        name, value = (
            (topic.get("name"), topic.get("proficiency", 0.5)) if isinstance(topic, dict) else (None, None)
        )
        if (
            not isinstance(name, str)
            or not name
            or not isinstance(value, (int, float))
            or not 0 <= value <= 1
        ):
            raise DatasetError(f"{path}: topics[{index}]: needs a 'name' and a 'proficiency' from 0 to 1")
        proficiencies[name] = float(value)
    return proficiencies


def random_profile(rng: random.Random) -> dict[str, float]:
    """A seeded profile of the original's three topics."""
    return {topic: round(rng.uniform(0.2, 0.8), 2) for topic in TOPICS}


@dataclass
class SimulatedStudent:
    """A student's proficiencies, the random source of its answers and its answer history."""

    proficiency: dict[str, float]
    rng: random.Random
    question_gain: float = 0.05
    lesson_gain: float = 0.03
    history: list[tuple[str, str, bool]] = field(default_factory=list)

    def mean(self) -> float:
        """The mean proficiency over the topics."""
        return sum(self.proficiency.values()) / len(self.proficiency)

    def _learn(self, topic: str, gain: float) -> None:
        self.proficiency[topic] = min(1.0, max(0.0, self.proficiency[topic] + gain))

    def answer(self, topic: str, difficulty: str) -> bool:
        """Answer a question (whether it was right) and learn from it."""
        level = self.proficiency[topic]
        correct = self.rng.random() < max(0.1, min(0.9, level + ANSWER_SHIFT[difficulty]))
        fit = max(0.0, 1.0 - 2.0 * abs(LEVELS[difficulty] - level))
        self._learn(topic, self.question_gain * fit * (1.0 if correct else 0.5))
        self.history.append((topic, difficulty, correct))
        return correct

    def study(self, topic: str) -> None:
        """Learn from a lesson on ``topic``."""
        self._learn(topic, self.lesson_gain * (1.0 - self.proficiency[topic]))

    def accuracy(self, topic: Optional[str] = None) -> Optional[float]:
        """The share of right answers (on ``topic``, or overall); None before any question."""
        answers = [c for t, _, c in self.history if topic is None or t == topic]
        return sum(answers) / len(answers) if answers else None
