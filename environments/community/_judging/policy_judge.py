"""An LLM judge for the community's judged training environments, and the tallies they log.

:class:`PolicyJudgeMixin` (listed before the environment's base class) gives the environment ``self.judge``, a
:class:`~atroposlib.evals.judge.Judge`. Where it runs: the ``--judge.*`` flags (or the ``judge:`` section of the
``--config`` YAML) when given; else ``--env.judge_base_url`` / ``--env.judge_model_name`` with the key from
``$judge_api_key_env``; else the policy's own inference servers, outside the ManagedServer context, so judge
requests are never part of the trained tokens (compat: the original environments judged with the policy's
server).

A judge reply that cannot be read is a judge failure: it is never a win or a loss for either reply. The
environments count judgements asked and failed in a :class:`JudgeTally`, logged as ``train/judge_failures``
and ``train/judge_failure_rate``.

:func:`round_robin` compares every pair of a group's replies in both orders (``Judge.compare``) and gives each
reply the mean of its readable comparison scores (1 win, 0.5 tie, 0 loss); :func:`preferred_first` reads a
judge's ``\\boxed{A}`` / ``\\boxed{B}``; :func:`fill_unreadable` gives a reply whose grade could not be read
its group's mean, so it carries no advantage; :class:`JudgedEvaluation` evaluates with unreadable verdicts
left out of the means.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import Field

from atroposlib.evals.judge import Judge, JudgedEnvMixin, Judgement, JudgeSettings, failure_metrics
from atroposlib.utils.replies import final_boxed_answer

Messages = list[dict[str, str]]


class PolicyJudgeSettings(JudgeSettings):
    """The judge's settings; ``judge_base_url`` unset judges with the policy's own servers."""

    judge_base_url: Optional[str] = Field(  # type: ignore[assignment]
        None,
        description="judge server (OpenAI-compatible, ending in /v1); unset: the policy's own servers, "
        "unless the judge section names one",
    )


class PolicyJudgeMixin(JudgedEnvMixin):
    """``self.judge`` on the server the module docstring names; the config is a :class:`PolicyJudgeSettings`."""

    @property
    def judge(self) -> Judge:
        """The judge client, built on first use."""
        if self._judge is None and self._judge_configs is None and not self.config.judge_base_url:
            cfg = self.config
            self._judge = Judge(
                self.server,
                temperature=cfg.judge_temperature,
                max_tokens=cfg.judge_max_tokens,
                max_attempts=cfg.judge_max_retries,
                retry_multiplier=cfg.judge_retry_multiplier,
                retry_max_wait=cfg.judge_retry_max_wait,
                max_concurrent=cfg.judge_max_concurrent_calls,
                delay_s=cfg.judge_rate_limit_delay,
            )
        return super().judge

    async def _close_inference_clients(self) -> None:
        """Close a separate judge's connections; the policy's servers are closed once, by the base."""
        if self._judge is not None and self._judge.server is self.server:
            self._judge = None
        await super()._close_inference_clients()


@dataclass
class JudgeTally:
    """Judgements asked and failed since the last wandb log."""

    asked: int = 0
    failed: int = 0

    def add(self, asked: int, failed: int) -> None:
        """Count ``asked`` judgements of which ``failed`` could not be read."""
        self.asked += asked
        self.failed += failed

    def drain(self) -> dict[str, float]:
        """``train/judge_failures`` and ``train/judge_failure_rate`` (none when nothing was asked), then
        start over."""
        if not self.asked:
            return {}
        metrics = failure_metrics([self.failed], [self.asked])
        self.asked = self.failed = 0
        return {f"train/{key}": value for key, value in metrics.items()}


_LETTER = re.compile(r"^(?:\\text(?:bf)?\s*\{)?\s*(?:response|option)?\s*([AB])\s*\}?[.)]?$", re.IGNORECASE)


def preferred_first(judgement: str) -> Optional[float]:
    """The score of the reply shown as A from a judge's one boxed letter: 1.0 for ``A``, 0.0 for ``B``;
    None for no box, several different boxes or anything else."""
    match = _LETTER.match((final_boxed_answer(judgement) or "").strip())
    if match is None:
        return None
    return 1.0 if match.group(1).upper() == "A" else 0.0


@dataclass(frozen=True)
class RoundRobin:
    """Every pair of replies compared: each reply's mean readable ``shares`` (None when none of its
    comparisons could be read), judgements ``asked`` and ``failed``, and the judges' replies (``texts``)."""

    shares: list[Optional[float]]
    asked: int
    failed: int
    texts: list[str]


async def round_robin(
    judge: Judge,
    messages_for: Callable[[str, str], Messages],
    replies: Sequence[str],
    parse: Callable[[str], Optional[float]] = preferred_first,
) -> RoundRobin:
    """Compare every pair of ``replies`` in both orders (``messages_for(reply_a, reply_b)`` builds the
    judge's chat; ``parse`` gives the score of reply A)."""
    pairs = list(itertools.combinations(range(len(replies)), 2))
    comparisons = await asyncio.gather(
        *(judge.compare(messages_for, replies[a], replies[b], parse) for a, b in pairs)
    )
    scores: list[list[float]] = [[] for _ in replies]
    texts: list[str] = []
    for (a, b), comparison in zip(pairs, comparisons, strict=True):
        texts += [comparison.forward.text, comparison.swapped.text]
        if comparison.score is not None:
            scores[a].append(comparison.score)
            scores[b].append(1.0 - comparison.score)
    return RoundRobin(
        shares=[sum(s) / len(s) if s else None for s in scores],
        asked=2 * len(pairs),
        failed=sum(c.failures for c in comparisons),
        texts=texts,
    )


@dataclass(frozen=True)
class EvalGrade:
    """The grade of one evaluation reply: its ``score`` (None: the judge's verdict could not be read),
    judgements ``asked`` and ``failed``, and ``fields`` written with the sample."""

    score: Optional[float]
    asked: int = 0
    failed: int = 0
    fields: dict[str, Any] = field(default_factory=dict)


class JudgedEvaluation:
    """Evaluation of a judged :class:`~atroposlib.envs.single_turn.SingleTurnEnv` (listed before it): each
    reply is graded by the environment's ``async eval_grade(reply, item) -> EvalGrade``. A reply without a
    score is left out of ``eval/percent_correct`` and ``eval/mean_score`` (never a win or a loss) and counted
    in ``eval/unscored``; ``eval/judge_failures`` and ``eval/judge_failure_rate`` count the judgements."""

    async def eval_grade(self, reply: str, item: Any) -> EvalGrade:
        """The grade of the evaluation ``reply`` to ``item``."""
        raise NotImplementedError

    async def _eval_one(self, item: Any, sem: asyncio.Semaphore) -> dict[str, Any]:
        messages, reply = await self.sample_eval_reply(item, sem)
        grade = await self.eval_grade(reply, item)
        return {
            "messages": [*messages, {"role": "assistant", "content": reply}],
            **self.eval_sample_fields(item),
            **grade.fields,
            "score": grade.score,
            "correct": grade.score is not None and grade.score >= self.correct_threshold,
            "judges_asked": grade.asked,
            "judge_failures": grade.failed,
        }

    def evaluation_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        scored = [s for s in samples if s["score"] is not None]
        counts = failure_metrics([s["judge_failures"] for s in samples], [s["judges_asked"] for s in samples])
        return {
            "eval/percent_correct": sum(1.0 for s in scored if s["correct"]) / len(scored) if scored else 0.0,
            "eval/mean_score": sum(s["score"] for s in scored) / len(scored) if scored else 0.0,
            "eval/unscored": float(len(samples) - len(scored)),
            **{f"eval/{key}": value for key, value in counts.items()},
            **self.extra_eval_metrics(scored),
        }


def fill_unreadable(scores: Sequence[Optional[float]]) -> list[float]:
    """``scores`` with each None (a reply the judge's verdict on could not be read) replaced by the mean of
    the group's other scores, so it carries no advantage in its group (0.0 when every score is None)."""
    readable = [s for s in scores if s is not None]
    neutral = sum(readable) / len(readable) if readable else 0.0
    return [neutral if s is None else s for s in scores]


def graded_scores(grades: Sequence[Optional[Judgement[float]]], tally: JudgeTally) -> list[float]:
    """A group's scores from one judge grade per reply: the grade's value, 0.0 for a reply scored without the
    judge (None), and :func:`fill_unreadable`'s mean for an unreadable grade; the judgements are counted in
    ``tally``."""
    asked = [g for g in grades if g is not None]
    tally.add(len(asked), sum(g.failed for g in asked))
    return fill_unreadable([0.0 if g is None else g.value for g in grades])


def eval_grade_of(grade: Optional[Judgement[float]], fields: Optional[dict[str, Any]] = None) -> EvalGrade:
    """The :class:`EvalGrade` of one judge grade (None: scored 0.0 without the judge), with ``fields``."""
    if grade is None:
        return EvalGrade(0.0, fields=dict(fields or {}))
    return EvalGrade(grade.value, 1, int(grade.failed), {**(fields or {}), **grade.record()})


class JudgedGrades(JudgedEvaluation):
    """Scores of an environment whose every reply gets one judge grade from its ``async grade(reply, item) ->
    Optional[Judgement[float]]`` (None: scored 0.0 without the judge): training groups by
    :func:`graded_scores`, evaluation by :func:`eval_grade_of` with :meth:`eval_fields`, the judgements counted
    in ``self.tally`` and logged with each wandb log. List it before the environment's base class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tally = JudgeTally()

    async def grade(self, reply: str, item: Any) -> Optional[Judgement[float]]:
        """The judge's grade of ``reply`` (None: scored 0.0 without asking)."""
        raise NotImplementedError

    def eval_fields(self, reply: str, item: Any) -> dict[str, Any]:
        """Fields written with an evaluation sample besides the judgement (default none)."""
        return {}

    async def score_replies_async(self, replies: Sequence[str], item: Any) -> list[float]:
        grades = await asyncio.gather(*(self.grade(reply, item) for reply in replies))
        return graded_scores(grades, self.tally)

    async def eval_grade(self, reply: str, item: Any) -> EvalGrade:
        return eval_grade_of(await self.grade(reply, item), self.eval_fields(reply, item))

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        await super().wandb_log({**(wandb_metrics or {}), **self.tally.drain()})  # type: ignore[misc]


def shows_judge_markers(reply: str, markers: Sequence[str]) -> bool:
    """Whether ``reply`` writes any of the judge template's section markers (an attempt to rewrite the
    judge's prompt), ignoring case."""
    lowered = reply.lower()
    return any(marker.lower() in lowered for marker in markers)


__all__: list[Any] = [
    "EvalGrade",
    "JudgedEvaluation",
    "JudgedGrades",
    "JudgeTally",
    "PolicyJudgeMixin",
    "PolicyJudgeSettings",
    "RoundRobin",
    "eval_grade_of",
    "fill_unreadable",
    "graded_scores",
    "preferred_first",
    "round_robin",
    "shows_judge_markers",
]
