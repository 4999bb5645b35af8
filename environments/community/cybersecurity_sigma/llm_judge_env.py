"""Sigma rules judged against the gold rule by an LLM.

The task and data are those of ``jaccard_reward_env.py`` (``sigma_env.py``). Reward: a rule that can be read
(``sigma_rules.read_rule``: one boxed YAML after the reasoning that parses and whose detection pySigma
accepts) is shown, written canonically, to a judge with the gold rule; the judge answers ``1`` when it is
functionally equivalent and correct, ``0`` otherwise (after an optional ``<think>`` block), and the rule
scores that. Anything else from the judge is a judge failure: the reply gets the mean of its group's other
scores (no advantage either way), ``train/judge_failures`` / ``train/judge_failure_rate`` are logged, and in
evaluation it is left out of the means (``eval/unscored``). A reply without a readable rule scores 0.0
without asking the judge.

The judge: ``--judge.base_url`` / ``--judge.model_name`` ... (any OpenAI-compatible server), else the policy's
own servers, as the original (``_judging/policy_judge.py``).

``python environments/community/cybersecurity_sigma/llm_judge_env.py {serve,process,evaluate} ...``
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

# Run as a script, the repository root is not on the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from atroposlib.evals.judge import Judgement  # noqa: E402
from environments.community._judging.policy_judge import (  # noqa: E402
    JudgedGrades,
    PolicyJudgeMixin,
    PolicyJudgeSettings,
)
from environments.community.cybersecurity_sigma.sigma_env import SigmaEnvConfig, SigmaRuleBase, SigmaTask  # noqa: E402
from environments.community.cybersecurity_sigma.sigma_rules import canonical_yaml, read_rule  # noqa: E402

JUDGE_TEMPLATE = """You are an expert in cybersecurity and YAML-based Sigma rules. Given a gold-standard Sigma rule
and a generated rule, decide whether the generated rule is functionally equivalent and correct.

Answer "1" if the generated rule is correct and matches the intent and structure of the gold rule, otherwise "0".

GOLD RULE:
{gold}

GENERATED RULE:
{generated}

Answer with one character: "1" or "0"."""


def parse_equivalence(judgement: str) -> Optional[float]:
    """1.0 for a judge answer of ``1``, 0.0 for ``0`` (quotes and a final period allowed); else None."""
    answer = judgement.strip().strip("\"'.` ")
    return {"1": 1.0, "0": 0.0}.get(answer)


class JudgedSigmaConfig(PolicyJudgeSettings, SigmaEnvConfig):
    """SigmaEnvConfig plus the judge."""

    judge_max_tokens: int = Field(
        0, ge=0, description="token budget of one judgement (0: the server's; a thinking judge needs room)"
    )


class SigmaRuleEnv(PolicyJudgeMixin, JudgedGrades, SigmaRuleBase):
    """Sigma rules judged against the gold rule (see the module docstring)."""

    name = "llm_judge_sigmarule"
    env_config_cls = JudgedSigmaConfig
    config: JudgedSigmaConfig

    def judge_messages(self, rule: dict[str, Any], item: SigmaTask) -> list[dict[str, str]]:
        """The judge's chat comparing a generated rule with the gold rule."""
        text = JUDGE_TEMPLATE.format(gold=canonical_yaml(item.rule), generated=canonical_yaml(rule))
        return [{"role": "user", "content": text}]

    async def grade(self, reply: str, item: SigmaTask) -> Optional[Judgement[float]]:
        """The judge's verdict on the reply's rule (None: no readable rule, scored 0.0)."""
        rule = read_rule(reply).rule
        if rule is None:
            return None
        return await self.judge.grade(self.judge_messages(rule, item), parse_equivalence)

    def eval_fields(self, reply: str, item: SigmaTask) -> dict[str, Any]:
        return self.rule_fields(reply)


if __name__ == "__main__":
    SigmaRuleEnv.cli()
