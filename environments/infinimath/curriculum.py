"""The InfiniteMath curriculum: ``mathgenerator``'s generators grouped into seven difficulty levels.

:class:`MathCurriculum` hands out problems of its current level and moves up a level once the last
``min_evaluations`` answers at that level reach ``progress_threshold`` accuracy. The level table and the
methods keep the original's names, so code written against it works unchanged.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Optional

logger = logging.getLogger(__name__)

#: generator ids of ``mathgenerator`` (1.5) by level
DIFFICULTY_LEVELS: dict[int, list[int]] = {
    # basic arithmetic: + - * /, square, factorial, absolute difference, percentage, primality
    1: [0, 1, 2, 3, 8, 31, 71, 80, 90],
    # fractions and pre-algebra: roots, basic algebra, fraction operations, powers, percentage errors
    2: [6, 11, 13, 16, 28, 44, 47, 53, 97, 118, 119, 124],
    # geometry: triangles, distances, polygon angles, circles and sectors
    3: [18, 19, 22, 24, 25, 49, 58, 75, 96, 104, 108, 112, 115],
    # algebra and basic statistics: LCM, GCD, quadratics, linear systems, interest, mean and median
    4: [9, 10, 20, 21, 23, 26, 40, 41, 45, 50, 76, 78, 105],
    # vectors, matrices and solid geometry
    5: [17, 32, 33, 34, 35, 36, 37, 38, 39, 43, 46, 60, 61, 70, 72, 77, 95, 113, 117, 122, 123],
    # calculus, probability, number bases, sequences
    6: [
        4,
        5,
        7,
        12,
        14,
        15,
        27,
        30,
        42,
        48,
        52,
        54,
        55,
        56,
        59,
        62,
        64,
        73,
        79,
        84,
        88,
        89,
        91,
        103,
        107,
        110,
    ],
    # complex numbers, progressions, means, matrix inverse, sets, base conversion
    7: [65, 66, 67, 68, 69, 74, 85, 92, 93, 94, 98, 99, 100, 101, 106, 109, 111, 121],
}

LEVEL_DESCRIPTIONS = {
    1: "Basic arithmetic operations (addition, subtraction, multiplication, division)",
    2: "Basic operations with fractions and pre-algebra",
    3: "Basic geometry and more algebra",
    4: "More advanced algebra and basic statistics",
    5: "Vectors, matrices, and solid geometry",
    6: "Advanced topics (calculus, statistics, computer science)",
    7: "Most complex topics (complex numbers, advanced operations)",
}


def level_of(generator_id: int) -> Optional[int]:
    """The level a generator belongs to, or None."""
    return next((level for level, ids in DIFFICULTY_LEVELS.items() if generator_id in ids), None)


class MathCurriculum:
    """Problems of the current level; promotion by recent accuracy (see the module docstring)."""

    DIFFICULTY_LEVELS = DIFFICULTY_LEVELS

    def __init__(
        self,
        starting_level: int = 1,
        progress_threshold: float = 0.8,
        min_evaluations: int = 5,
        max_attempts: int = 5,
        rng: Optional[random.Random] = None,
    ):
        if starting_level not in DIFFICULTY_LEVELS:
            raise ValueError(
                f"Invalid starting level: {starting_level}. Available levels: {list(DIFFICULTY_LEVELS)}"
            )
        self.current_level = starting_level
        self.progress_threshold = progress_threshold
        self.min_evaluations = min_evaluations
        self.max_attempts = max_attempts
        self.rng = rng or random.Random()
        self.performance_history: dict[int, list[bool]] = {level: [] for level in DIFFICULTY_LEVELS}

    def get_problem(self, level: Optional[int] = None) -> tuple[str, str, int]:
        """``(problem, solution, generator_id)`` from a generator of ``level`` (default: the current one).

        ``mathgenerator`` draws from the global ``random`` module: it is seeded from this curriculum's own
        generator for the call and restored afterwards, so problems follow the curriculum's seed. A generator
        that raises is tried again with another, ``max_attempts`` times in all.
        """
        import mathgenerator

        ids = list(DIFFICULTY_LEVELS[level or self.current_level])
        error: Optional[Exception] = None
        for _ in range(self.max_attempts):
            generator_id = self.rng.choice(ids)
            saved = random.getstate()
            random.seed(self.rng.getrandbits(64))
            try:
                problem, solution = mathgenerator.genById(generator_id)
                return str(problem), str(solution), generator_id
            except Exception as exc:  # a generator of the library that fails on its own draw
                logger.warning("mathgenerator generator %d failed: %s", generator_id, exc)
                error = exc
                if len(ids) > 1:
                    ids.remove(generator_id)
            finally:
                random.setstate(saved)
        raise RuntimeError(f"no generator of level {level or self.current_level} produced a problem: {error}")

    def record_performance(self, generator_id: int, is_correct: bool) -> None:
        """Record one answer to a problem of ``generator_id``'s level."""
        level = level_of(generator_id)
        if level is not None:
            self.performance_history[level].append(bool(is_correct))

    def get_success_rate(self, level: int) -> Optional[float]:
        """Accuracy over the last ``min_evaluations`` answers at ``level``; None with fewer answers."""
        history = self.performance_history[level]
        if len(history) < self.min_evaluations:
            return None
        recent = history[-self.min_evaluations :]
        return sum(recent) / len(recent)

    def should_advance(self) -> bool:
        rate = self.get_success_rate(self.current_level)
        return (
            rate is not None
            and rate >= self.progress_threshold
            and self.current_level < max(DIFFICULTY_LEVELS)
        )

    def advance_difficulty(self) -> bool:
        """Move up one level when :meth:`should_advance`; whether it did."""
        if self.should_advance():
            self.current_level += 1
            return True
        return False

    def get_current_level(self) -> int:
        return self.current_level

    def get_num_levels(self) -> int:
        return len(DIFFICULTY_LEVELS)

    def get_level_description(self, level: Optional[int] = None) -> str:
        return LEVEL_DESCRIPTIONS[level or self.current_level]

    def reset(self, level: int = 1) -> None:
        """Back to ``level`` with an empty history."""
        if level not in DIFFICULTY_LEVELS:
            raise ValueError(f"Invalid level: {level}. Available levels: {list(DIFFICULTY_LEVELS)}")
        self.current_level = level
        self.performance_history = {lvl: [] for lvl in DIFFICULTY_LEVELS}

    def get_generator_info(self) -> list[dict[str, Any]]:
        """Every ``mathgenerator`` generator: id, name, function, subject, parameters and level."""
        import mathgenerator

        return [
            {"id": gen[0], "name": gen[1], "function": gen[3], "subject": gen[4], "params": gen[5],
             "difficulty_level": level_of(gen[0])}
            for gen in mathgenerator.getGenList()
        ]  # fmt: skip
