"""The scramble curriculum: five levels of scramble depth, advanced when the current level is mastered.

Level 1: 1-3 scramble moves (15 moves allowed), 2: 4-7 (20), 3: 8-12 (25), 4: 13-17 (30), 5: 18-22 (40).
With ``auto_progress`` the curriculum moves up one level once, over the last ``advancement_window_size``
episodes played at the current level, the solve rate reaches ``success_threshold`` and at least
``min_solved_at_level`` of them were solved; the window starts empty at each new level.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class CurriculumLevel:
    """One level: the scramble depths drawn from and the moves allowed to solve."""

    level: int
    min_scramble_moves: int
    max_scramble_moves: int
    max_steps: int
    description: str

    def scramble_length(self, rng: random.Random) -> int:
        """A scramble depth of this level."""
        return rng.randint(self.min_scramble_moves, self.max_scramble_moves)


LEVELS = {
    1: CurriculumLevel(1, 1, 3, 15, "Beginner: one to three scramble moves"),
    2: CurriculumLevel(2, 4, 7, 20, "Easy: basic patterns and short sequences"),
    3: CurriculumLevel(3, 8, 12, 25, "Intermediate: longer patterns and sequences"),
    4: CurriculumLevel(4, 13, 17, 30, "Advanced: scrambles that need deep planning"),
    5: CurriculumLevel(5, 18, 22, 40, "Expert: scrambles near God's number"),
}


class RubiksCubeCurriculum:
    """The current level and the recent results that decide when to move up (see the module docstring)."""

    def __init__(
        self,
        starting_level: int = 1,
        max_level: int = 5,
        auto_progress: bool = True,
        success_threshold: float = 0.7,
        advancement_window_size: int = 50,
        min_solved_at_level: int = 25,
    ):
        if not 1 <= starting_level <= max_level <= len(LEVELS):
            raise ValueError(f"curriculum levels must satisfy 1 <= start <= max <= {len(LEVELS)}")
        self.current_level = starting_level
        self.max_level = max_level
        self.auto_progress = auto_progress
        self.success_threshold = success_threshold
        self.min_solved_at_level = min_solved_at_level
        self.recent: deque[bool] = deque(maxlen=advancement_window_size)

    @property
    def level(self) -> CurriculumLevel:
        return LEVELS[self.current_level]

    def record(self, solved: bool) -> bool:
        """Record an episode played at the current level; return whether the curriculum moved up."""
        self.recent.append(solved)
        if not self.auto_progress or self.current_level >= self.max_level:
            return False
        solved_count = sum(self.recent)
        full = len(self.recent) == self.recent.maxlen
        if (
            full
            and solved_count / len(self.recent) >= self.success_threshold
            and solved_count >= self.min_solved_at_level
        ):
            self.current_level += 1
            self.recent.clear()
            return True
        return False
