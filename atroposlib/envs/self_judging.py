"""Judge and self-correction rounds of atroposlib 0.4.0's math environment, for a single-turn environment whose
replies are checked against a gold answer (scores +1 / -1).

After a training group holding both a right and a wrong reply, with probability ``percent_to_judge`` the
environment queues two judge rounds (backlog items): the policy is shown the problem and one of the two
answers (the text after the reasoning) and asked whether it is correct, ``\\boxed{True}`` or
``\\boxed{False}``. A judge group scores -1 for a wrong verdict (or a reply cut at its budget); a right verdict
on a right answer scores +1, and a right verdict on a wrong answer scores the share of ``group_size``
self-correction attempts (the policy shown the problem, the wrong answer and its own verification, asked to
solve it again) that reach the gold answer. A self-correction group whose scores differ is queued in turn
and trained as a group of its own. With probability ``percent_length_penalty``, a judge group (or a training
group) whose replies are all right is scored by length instead (``cos(pi * (len - shortest) / spread)``, when
the longest is more than 10 % longer than the shortest) rather than dropped. With
``mask_too_long_completions``, replies cut at their budget carry ``set_advantage_to_zero`` in ``overrides``.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from atroposlib.envs.groups import ScoredDataGroup
from atroposlib.utils.replies import answer_section, final_boxed_answer

JUDGE_PROMPT = (
    "Here is a math problem and a proposed solution. Check the solution carefully. Is its final answer "
    "correct?\n\n[PROBLEM]\n{problem}\n[END PROBLEM]\n\n[SOLUTION]\n{solution}\n[END SOLUTION]\n\n"
    "After your reasoning, answer \\boxed{{True}} if the final answer is correct or \\boxed{{False}} if it is not."
)
RETRY_PROMPT = (
    "Here is a math problem, a proposed solution and a verification of it, which found the solution wrong. "
    "Solve the problem again, correctly.\n\n[PROBLEM]\n{problem}\n[END PROBLEM]\n\n[SOLUTION]\n{solution}\n"
    "[END SOLUTION]\n\n[VERIFICATION]\n{verification}\n[END VERIFICATION]\n\nGive the final answer in \\boxed{{}}."
)


@dataclass(frozen=True)
class JudgeTask:
    """A backlog item: judge ``solution`` (the answer part of a reply to ``item``), which is ``correct``."""

    item: Any
    solution: str
    correct: bool


@dataclass(frozen=True)
class SelfCorrectGroup:
    """A backlog item: a finished self-correction group, trained as it is."""

    item: Any
    group: ScoredDataGroup


def answer_text(reply: str) -> str:
    """The part of a reply after its reasoning (the whole reply when it has no think block)."""
    section = answer_section(reply)
    return section if section is not None else reply.split("</think>")[-1]


_VERDICT = re.compile(r"^(?:\\text(?:bf)?\s*\{)?\s*(true|false)\s*\}?$", re.IGNORECASE)


def verdict(reply: str) -> Optional[bool]:
    """The judge's verdict: the one boxed ``True`` / ``False`` after the reasoning, or None."""
    match = _VERDICT.match((final_boxed_answer(reply) or "").strip())
    return None if match is None else match.group(1).lower() == "true"


def length_scores(lengths: Sequence[int]) -> Optional[list[float]]:
    """0.4.0's length penalty for an all-right group, or None when lengths differ by 10 % or less."""
    shortest = min(lengths)
    spread = max(lengths) - shortest
    if spread <= 0.1 * shortest or spread == 0:
        return None
    return [math.cos(math.pi * (n - shortest) / spread) for n in lengths]


def too_long(node: Any) -> bool:
    """Whether a tracked sequence was cut at its token budget."""
    return ((getattr(node, "metadata", None) or {}).get("finish_reason")) == "length"


class SelfJudgingRounds:
    """Mixin for a :class:`~atroposlib.envs.single_turn.SingleTurnEnv` with +1/-1 scores: see the module
    docstring. The environment provides ``prompt_messages`` (for its system prompt) and ``check(item, reply)``
    (an awaitable: does the reply reach the item's gold answer?), ``problem_text(item)``, and config fields
    ``percent_to_judge``, ``percent_length_penalty`` and ``mask_too_long_completions``."""

    judge_rng: random.Random

    def judging_overrides(self, nodes: Sequence[Any]) -> list[dict[str, Any]]:
        """``set_advantage_to_zero`` for replies cut at their budget (with ``mask_too_long_completions``)."""
        mask = self.config.mask_too_long_completions
        return [{"set_advantage_to_zero": True} if mask and too_long(n) else {} for n in nodes]

    def judge_tasks(
        self, item: Any, replies: Sequence[str], scores: Sequence[float], nodes: Sequence[Any]
    ) -> list:
        """The judge rounds to queue after a training group (none unless drawn with ``percent_to_judge``)."""
        if self.config.percent_to_judge <= 0 or self.judge_rng.random() >= self.config.percent_to_judge:
            return []
        right = next((r for r, s in zip(replies, scores, strict=True) if s > 0), None)
        wrong = next(
            (r for r, s, n in zip(replies, scores, nodes, strict=True) if s < 0 and not too_long(n)), None
        )
        if right is None or wrong is None:
            return []
        return [JudgeTask(item, answer_text(right), True), JudgeTask(item, answer_text(wrong), False)]

    def length_penalised(self, scores: Sequence[float], nodes: Sequence[Any]) -> Optional[list[float]]:
        """Length scores for an all-right group, drawn with ``percent_length_penalty``; None otherwise."""
        if (
            self.config.percent_length_penalty <= 0
            or self.judge_rng.random() >= self.config.percent_length_penalty
        ):
            return None
        return length_scores([len(n.tokens) for n in nodes])

    async def _sample_chat(self, messages: list[dict[str, str]]) -> tuple[list[str], list[Any]]:
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            completion = await managed.chat_completion(
                messages=messages,
                n=self.config.group_size,
                max_tokens=self.generation_budget,
                temperature=self.config.temperature,
                top_p=self.config.top_p,
            )
            nodes = managed.get_state()["nodes"]
        return [choice.message.content or "" for choice in completion.choices], nodes

    def _system(self, item: Any) -> list[dict[str, str]]:
        return [m for m in self.prompt_messages(item) if m["role"] == "system"]

    async def judge_round(self, task: JudgeTask) -> tuple[Optional[ScoredDataGroup], list]:
        """The judge group of ``task`` and the self-correction groups it yields (see the module docstring)."""
        prompt = JUDGE_PROMPT.format(problem=self.problem_text(task.item), solution=task.solution)
        messages = [*self._system(task.item), {"role": "user", "content": prompt}]
        replies, nodes = await self._sample_chat(messages)
        if len(nodes) != len(replies):
            return None, []
        right = [verdict(r) is task.correct and not too_long(n) for r, n in zip(replies, nodes, strict=True)]
        scores: list[float] = []
        backlog: list = []
        for reply, ok in zip(replies, right, strict=True):
            if not ok:
                scores.append(-1.0)
            elif task.correct:
                scores.append(1.0)
            else:
                share, corrected = await self.self_correction(task, answer_text(reply))
                scores.append(share)
                if corrected is not None:
                    backlog.append(corrected)
        if all(s == 1.0 for s in scores):
            scores = self.length_penalised(scores, nodes) or scores
        group = self.build_group(messages, replies, nodes, scores, self.judging_overrides(nodes))
        return group, backlog

    async def self_correction(
        self, task: JudgeTask, verification: str
    ) -> tuple[float, Optional[SelfCorrectGroup]]:
        """The share of retries reaching the gold answer, and the retries' group."""
        prompt = RETRY_PROMPT.format(
            problem=self.problem_text(task.item), solution=task.solution, verification=verification
        )
        messages = [*self._system(task.item), {"role": "user", "content": prompt}]
        replies, nodes = await self._sample_chat(messages)
        if not replies or len(nodes) != len(replies):
            return 0.0, None
        scores = [
            -1.0 if too_long(n) else (1.0 if await self.check(task.item, r) else -1.0)
            for r, n in zip(replies, nodes, strict=True)
        ]
        share = sum(1 for s in scores if s > 0) / len(scores)
        group = self.build_group(messages, replies, nodes, scores, self.judging_overrides(nodes))
        return share, SelfCorrectGroup(task.item, group)
