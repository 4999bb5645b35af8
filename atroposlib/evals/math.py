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

With ``answer_tag=True`` a reply without a box may give its answer inside ``<answer>...</answer>`` instead
(OlympiadBench's prompt asks for ``<answer>\\boxed{...}</answer>``).

The gold answers of the hub sets: :func:`gsm8k_gold` (after ``####``), :func:`solution_gold` (the last box
of a MATH solution), :func:`gold_latex` (a plain answer; numbers from numeric columns as integers).

:class:`MathEval` is the base of the math benchmarks of ``environments/eval_environments/`` (gsm8k, MATH-500,
MATH, AIME, AIMO, OlympiadBench): a row gives a problem, a gold answer, breakdown groups and sample fields;
the prompt is the benchmark's template with a boxed-answer instruction; a reply scores 1 when
:class:`MathScorer` finds it correct. Besides the core's metrics it reports ``eval/hedge_rate`` and
``eval/unclosed_think_rate`` (shares of replies), and every sample keeps the verdict's reason as ``method``.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from pydantic import Field

from atroposlib.evals.data import Row, RowError
from atroposlib.evals.env import EvalConfig, EvalEnv
from atroposlib.evals.items import EvalItem, Reply, Score
from atroposlib.utils.math_checking import DEFAULT_TIMEOUT_S, MathChecker, gold_latex, reply_answers
from atroposlib.utils.replies import answer_section

__all__ = [
    "MathEval",
    "MathEvalConfig",
    "MathScorer",
    "MathVerdict",
    "gold_latex",
    "gsm8k_gold",
    "math_answer_instruction",
    "read_reply",
    "solution_gold",
    "strip_math_delimiters",
]

REASONS = ("correct", "wrong", "hedge", "no_answer", "unclosed_think", "empty")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


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


def read_reply(reply: Optional[str], answer_tag: bool = False) -> MathVerdict:
    """The answers of ``reply`` without comparing them: a verdict whose ``correct`` is False, with reason
    ``wrong`` when there are answers to compare (``empty``, ``unclosed_think`` or ``no_answer`` otherwise).
    With ``answer_tag``, a reply without a box may answer inside ``<answer>...</answer>``."""
    if reply is None or not reply.strip():
        return MathVerdict(False, "empty")
    section = answer_section(reply)
    if section is None:
        return MathVerdict(False, "unclosed_think")
    answers = reply_answers(reply)
    if not answers and answer_tag:
        tagged = [strip_math_delimiters(t) for t in _ANSWER_TAG.findall(section) if t.strip()]
        answers = list(dict.fromkeys(re.sub(r"\s+", " ", t) for t in tagged)) or None
    if not answers:
        return MathVerdict(False, "no_answer")
    return MathVerdict(False, "wrong", tuple(answers))


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
        answer_tag: bool = False,
    ) -> None:
        self.checker = checker or MathChecker(timeout_s=timeout_s, workers=workers)
        self.answer_tag = answer_tag

    def read(self, reply: Optional[str]) -> MathVerdict:
        """:func:`read_reply` with this scorer's ``answer_tag`` setting."""
        return read_reply(reply, self.answer_tag)

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


# ------------------------------------------------------------------------------------- the benchmarks

#: The answer instructions (lighteval's AIME prompt, which math_verify reads well).
HOPE_INSTRUCTION = (
    "The last line of your response should be of the following format: "
    "'Therefore, the final answer is: $\\boxed{ANSWER}$. I hope it is correct' "
    "(without quotes) where ANSWER is just the final number or expression that solves the problem."
)
BOXED_INSTRUCTION = (
    "Put your final answer in \\boxed{} format. For example: \\boxed{42} or \\boxed{\\frac{1}{2}}"
)


def math_answer_instruction(include_hope: bool = True) -> str:
    """The answer instruction of the math prompts: the "I hope it is correct" form when ``include_hope``
    (the configs' ``include_hope_suffix``), else the plain boxed one."""
    return HOPE_INSTRUCTION if include_hope else BOXED_INSTRUCTION


class MathEvalConfig(EvalConfig):
    """Settings the math benchmarks share (compat: atroposlib 0.4.0's field names)."""

    shuffle_seed: Optional[int] = Field(
        default=42, description="Seed of the item order (matters with eval_limit); None keeps the data order."
    )
    include_hope_suffix: bool = Field(
        default=True,
        description="Ask for 'Therefore, the final answer is: $\\boxed{ANSWER}$. I hope it is correct' "
        "(otherwise just a \\boxed{} answer).",
    )
    max_math_workers: int = Field(
        default=64, ge=1, description="Most worker processes checking answers (at most the CPU count, and 8)."
    )
    math_check_timeout: float = Field(
        default=DEFAULT_TIMEOUT_S, gt=0, description="Seconds one answer check may run before it is wrong."
    )


class MathEval(EvalEnv):
    """A math benchmark: declare :meth:`problem`, :meth:`gold` (and optionally :meth:`groups`,
    :meth:`fields`, :meth:`item_id`) and a ``prompt_template`` with ``{problem}`` (and
    ``{answer_instruction}``)."""

    env_config_cls: ClassVar[type[EvalConfig]] = MathEvalConfig
    config: MathEvalConfig
    prompt_template: ClassVar[str] = (
        "Solve the following math problem step by step. {answer_instruction}\n\n{problem}"
    )
    #: read ``<answer>...</answer>`` when a reply has no box
    answer_tag: ClassVar[bool] = False

    # -- the declaration ----------------------------------------------------------------------------------
    def problem(self, row: Row) -> str:
        return str(row.data["problem"])

    def gold(self, row: Row) -> str:
        return gold_latex(row.data["answer"])

    def groups(self, row: Row) -> dict[str, str]:
        return {}

    def fields(self, row: Row) -> dict[str, Any]:
        return {}

    def item_id(self, row: Row) -> str:
        value = row.data.get("unique_id", row.data.get("id"))
        if value not in (None, ""):
            return str(value)
        return f"{row.subset}/{row.index}" if row.subset else str(row.index)

    def format_prompt(self, problem: str) -> str:
        return self.prompt_template.format(
            problem=problem, answer_instruction=math_answer_instruction(self.config.include_hope_suffix)
        )

    # -- the core's hooks ---------------------------------------------------------------------------------
    def make_item(self, row: Row) -> Optional[EvalItem]:
        problem = self.problem(row)
        gold = self.gold(row)
        if not problem.strip():
            raise RowError("problem", "is empty")
        if not str(gold).strip():
            raise RowError("answer", "is empty")
        return EvalItem(
            id=self.item_id(row),
            prompt=self.format_prompt(problem),
            gold=gold,
            groups=self.groups(row),
            fields={"problem": problem, **self.fields(row)},
        )

    def build_items(self, rows: Sequence[Row]) -> list[EvalItem]:
        items = super().build_items(rows)
        if self.config.shuffle_seed is not None:
            random.Random(self.config.shuffle_seed).shuffle(items)
        return items

    @property
    def scorer(self) -> MathScorer:
        if getattr(self, "_scorer", None) is None:
            workers = min(self.config.max_math_workers, os.cpu_count() or 1, 8)
            self._scorer = MathScorer(self.config.math_check_timeout, workers, answer_tag=self.answer_tag)
        return self._scorer

    async def verdict(self, item: EvalItem, reply: Reply) -> MathVerdict:
        """The reply's verdict against the item's gold (override for several accepted golds)."""
        return await self.scorer.score(reply.text, item.gold)

    async def score(self, item: EvalItem, reply: Reply) -> Score:
        verdict = await self.verdict(item, reply)
        extracted = verdict.answer if verdict.reason in ("correct", "wrong") else None
        return Score(
            1.0 if verdict.correct else 0.0,
            extracted=extracted,
            method=verdict.reason,
            fields={"answers": list(verdict.answers)} if len(verdict.answers) > 1 else {},
        )

    def extra_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        total = max(len(samples), 1)
        return {
            f"eval/{reason}_rate": sum(1 for s in samples if s.get("method") == reason) / total
            for reason in ("hedge", "unclosed_think")
        }

    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        try:
            return await super().evaluate(*args, **kwargs)
        finally:
            if getattr(self, "_scorer", None) is not None:
                self._scorer.close()
                self._scorer = None
