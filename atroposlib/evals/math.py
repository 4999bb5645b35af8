"""The math answer check of the evaluations, on the gym's own (:mod:`atroposlib.utils.math_checking`).

A reply's answer is read as the environments read it (:func:`atroposlib.utils.math_checking.reply_answers`):
an optional ``<think>...</think>`` first, nothing inside it counts, and the answer is the ``\\boxed{}``
after it. It is compared with the gold answer by ``math_verify`` in worker processes, each check under a
time limit (:class:`~atroposlib.utils.math_checking.MathChecker`): ``0.5`` = ``\\frac{1}{2}`` = ``1/2``,
``x = 3`` = ``3``, sets and tuples by value. :meth:`MathScorer.score` says why an answer is wrong:

* ``correct`` - every boxed answer equals the gold;
* ``empty`` - the reply is empty (or whitespace);
* ``unclosed_think`` - the reasoning never closes (or repeats), so there is no answer (a reply cut at
  ``max_tokens`` inside its reasoning lands here);
* ``no_answer`` - no box after the reasoning;
* ``hedge`` - boxes that differ in value (``\\boxed{1/2}`` then ``\\boxed{1/3}``): wrong even when one of
  them is right; the same value boxed twice in different forms is one answer;
* ``wrong`` - one answer, not equal to the gold.

The gold answers of the hub sets: :func:`gsm8k_gold` (after ``####``), :func:`solution_gold` (the last box
of a MATH solution), :func:`gold_latex` (a plain answer; numbers from numeric columns as integers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from atroposlib.utils.math_checking import DEFAULT_TIMEOUT_S, MathChecker, gold_latex, reply_answers
from atroposlib.utils.replies import answer_section

__all__ = [
    "MathScorer",
    "MathVerdict",
    "gold_latex",
    "gsm8k_gold",
    "solution_gold",
    "strip_math_delimiters",
]

REASONS = ("correct", "wrong", "hedge", "no_answer", "unclosed_think", "empty")


@dataclass(frozen=True)
class MathVerdict:
    """A scored reply: whether it is ``correct``, its boxed ``answers`` (distinct, in order) and the
    ``reason`` (one of :data:`REASONS`). ``answer`` is the last of them (what samples show), or None."""

    correct: bool
    reason: str
    answers: tuple[str, ...] = ()

    @property
    def answer(self) -> Optional[str]:
        return self.answers[-1] if self.answers else None


def gsm8k_gold(answer: Any) -> str:
    """GSM8K's final answer: the text after the last ``####`` of its worked solution, thousands separators
    removed (``"... #### 1,000"`` -> ``"1000"``); a solution without ``####`` is taken whole."""
    text = str(answer)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return text.strip().replace(",", "")


def solution_gold(solution: Any) -> str:
    """The gold answer of a worked solution: its last ``\\boxed{}`` (MATH), else the stripped text."""
    return gold_latex(solution)


def strip_math_delimiters(text: Any) -> str:
    """``$...$``, ``\\(...\\)`` and ``\\[...\\]`` around an answer removed (OlympiadBench writes gold answers
    as ``$\\frac{1}{2}$``)."""
    value = str(text).strip()
    for start, end in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if value.startswith(start) and value.endswith(end) and len(value) > len(start) + len(end) - 1:
            value = value[len(start) : len(value) - len(end)].strip()
    return value


class MathScorer:
    """Scores replies against gold answers with a :class:`MathChecker` (created here unless given).

    ``timeout_s`` bounds each comparison (a comparison that runs over is wrong, counted in
    :attr:`checker` ``.timeouts``); ``workers`` processes run them (default: up to 4).
    """

    def __init__(
        self,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        workers: Optional[int] = None,
        checker: Optional[MathChecker] = None,
    ) -> None:
        self.checker = checker or MathChecker(timeout_s=timeout_s, workers=workers)

    @staticmethod
    def read(reply: Optional[str]) -> MathVerdict:
        """The answers of ``reply`` without comparing them: a verdict whose ``correct`` is False and whose
        ``reason`` is ``wrong`` when there are answers to compare."""
        if reply is None or not reply.strip():
            return MathVerdict(False, "empty")
        if answer_section(reply) is None:
            return MathVerdict(False, "unclosed_think")
        answers = reply_answers(reply)
        if not answers:
            return MathVerdict(False, "no_answer")
        return MathVerdict(False, "wrong", tuple(answers))

    async def score(self, reply: Optional[str], gold: Any) -> MathVerdict:
        """The verdict of ``reply`` against ``gold`` (LaTeX, or any value :func:`gold_latex` reads)."""
        return await self.score_any(reply, [gold])

    async def score_any(self, reply: Optional[str], golds: Sequence[Any]) -> MathVerdict:
        """Correct when every boxed answer equals one and the same of ``golds`` (data sets that list
        several accepted forms of one answer)."""
        verdict = self.read(reply)
        if not verdict.answers:
            return verdict
        targets = [strip_math_delimiters(gold_latex(gold)) for gold in golds]
        targets = [target for target in dict.fromkeys(targets) if target]
        for target in targets:
            if await self.checker.matches_all(target, verdict.answers):
                return MathVerdict(True, "correct", verdict.answers)
        if len(verdict.answers) > 1 and not await self._same_value(verdict.answers):
            return MathVerdict(False, "hedge", verdict.answers)
        return verdict

    async def _same_value(self, answers: Sequence[str]) -> bool:
        first, *rest = answers
        return all(await self.checker.matches_many(first, rest))

    def close(self) -> None:
        """Stop the checker's worker processes."""
        self.checker.close()
