"""The base of the judged benchmarks: an :class:`~atroposlib.evals.env.EvalEnv` with an LLM judge.

A judged benchmark declares its data and items as any benchmark does, and scores a reply by asking
``self.judge`` (:class:`~atroposlib.evals.judge.Judge`; ``--judge.*`` flags or the config's ``judge_*``
fields choose the server, see :mod:`atroposlib.evals.judge`). :func:`judged_score` turns judgements into a
:class:`~atroposlib.evals.items.Score`: a judgement the judge's reply could not be read from is a judge
failure, so a reply whose every judgement failed has no score (``eval/unscored``, left out of every mean,
never a win or a loss for either side). Besides the core's metrics, every judged benchmark reports
``eval/judge_failures`` (failed judgements, a count) and ``eval/judge_failure_rate`` (their share of all
judgements asked).

A reply whose think block never closes has no answer (:func:`answer_text` returns None); benchmarks score
it as their worst grade without asking the judge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from atroposlib.evals.env import EvalConfig, EvalEnv
from atroposlib.evals.items import Reply, Score
from atroposlib.evals.judge import Comparison, JudgedEnvMixin, Judgement, JudgeSettings, failure_metrics
from atroposlib.utils.replies import answer_section


class JudgedEvalConfig(JudgeSettings, EvalConfig):
    """The settings of a judged benchmark: the core's and the judge's."""


def answer_text(reply: Reply) -> Optional[str]:
    """The reply's answer (after its think block, stripped), or None when the think block never closes or
    nothing follows it."""
    section = answer_section(reply.text or "")
    if section is None or not section.strip():
        return None
    return section.strip()


def judged_score(
    value: Optional[float],
    judgements: Sequence[Judgement | Comparison],
    *,
    extracted: Any = None,
    method: Optional[str] = None,
    metrics: Optional[dict[str, float]] = None,
    **fields: Any,
) -> Score:
    """A :class:`Score` carrying its judgements (``samples.jsonl``: their text and verdicts) and the counts
    :meth:`JudgedEval.extra_metrics` adds up. ``value`` None marks the reply unscored (a judge failure)."""
    asked = 0
    failed = 0
    records = []
    for judgement in judgements:
        if isinstance(judgement, Comparison):
            asked += 2
            failed += judgement.failures
        else:
            asked += 1
            failed += int(judgement.failed)
        records.append(judgement.record())
    return Score(
        value,
        extracted=extracted,
        method=method or ("judge_failure" if value is None else "judge"),
        metrics=dict(metrics or {}),
        fields={"judgements": records, "judges_asked": asked, "judge_failures": failed, **fields},
    )


class JudgedEval(JudgedEnvMixin, EvalEnv):
    """An evaluation scored by an LLM judge (see the module docstring)."""

    def uses_judge(self) -> bool:
        """Whether this run asks a judge (benchmarks with a judge-free mode override it)."""
        return True

    async def setup(self) -> None:
        """The core's set-up, then the judge client (a missing API key stops the run here, in one line)."""
        await super().setup()
        if self.uses_judge():
            _ = self.judge

    def extra_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """``eval/judge_failures`` and ``eval/judge_failure_rate`` (see the module docstring)."""
        counts = failure_metrics(
            [int(s.get("judge_failures", 0)) for s in samples],
            [int(s.get("judges_asked", 0)) for s in samples],
        )
        return {f"eval/{key}": value for key, value in counts.items()}
