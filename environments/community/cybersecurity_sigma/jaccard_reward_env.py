"""Sigma rules rewarded by their similarity to the gold rule.

The policy answers a threat-hunting request with a Sigma rule in YAML inside ``\\boxed{}`` after its reasoning
(``sigma_env.py`` has the prompt and data). Reward: the Jaccard similarity of the rule's and the gold rule's
tokens over ``logsource`` and ``detection`` (``sigma_rules.py``: key order, quoting and YAML style do not
matter, extra tokens lower it); 0.0 for no rule, several different boxed rules, a rule only inside the
reasoning, YAML that does not parse or a detection pySigma refuses. When every reply of a group scores at
least 0.99, replies longer than half the generation budget lose up to 1.0 in proportion to the excess, as in
the original. Evaluation reports ``eval/mean_score`` (mean similarity), ``eval/percent_correct`` (replies at
``score_threshold``) and ``eval/valid_rule``; ``train/valid_rule`` is logged.

``python environments/community/cybersecurity_sigma/jaccard_reward_env.py {serve,process,evaluate} ...``
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

# Run as a script, the repository root is not on the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from atroposlib.envs.reply_fields import ReplyFields  # noqa: E402
from atroposlib.envs.reporting import mean  # noqa: E402
from environments.community._judging.train_shares import TrainShares  # noqa: E402
from environments.community.cybersecurity_sigma.sigma_env import SigmaEnvConfig, SigmaRuleBase, SigmaTask  # noqa: E402
from environments.community.cybersecurity_sigma.sigma_rules import read_rule, rule_similarity  # noqa: E402
from environments.community.sql_query_env.sql_query_env import shorter_is_better  # noqa: E402


class JaccardSigmaConfig(SigmaEnvConfig):
    """SigmaEnvConfig plus the evaluation threshold."""

    score_threshold: float = Field(
        0.8, ge=0.0, le=1.0, description="similarity at which an evaluation rule counts as correct"
    )


class SigmaRuleEnv(TrainShares, ReplyFields, SigmaRuleBase):
    """Sigma rules scored by token similarity to the gold rule (see the module docstring)."""

    name = "sigmarule"
    env_config_cls = JaccardSigmaConfig
    config: JaccardSigmaConfig

    @property
    def correct_threshold(self) -> float:  # type: ignore[override]
        return self.config.score_threshold

    def score_replies(self, replies: Sequence[str], item: SigmaTask) -> list[float]:
        rules = [read_rule(reply).rule for reply in replies]
        scores = [0.0 if rule is None else rule_similarity(item.rule, rule) for rule in rules]
        if len(replies) > 1:  # a training group (evaluation scores one reply at a time)
            self.record_share("valid_rule", (rule is not None for rule in rules))
            if all(s >= 0.99 for s in scores):
                lengths = [len(self.tokenizer.encode(r, add_special_tokens=False)) for r in replies]
                scores = shorter_is_better(lengths, self.generation_budget)
        return scores

    def reply_fields(self, reply: str, item: SigmaTask) -> dict[str, Any]:
        return self.rule_fields(reply)

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        return {"eval/valid_rule": mean([1.0 if s["valid_rule"] else 0.0 for s in samples])}


if __name__ == "__main__":
    SigmaRuleEnv.cli()
