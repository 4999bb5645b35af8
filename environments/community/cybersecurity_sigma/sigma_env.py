"""The shared part of the cybersecurity_sigma environments: data, prompt and configuration.

Data: ``datasets.load_dataset("mmaisel1/nous-rl-hackathon-sigma")`` (``train`` for training, ``test`` for
evaluation, each shuffled with seed 42); ``--env.dataset_path`` / ``--env.eval_dataset_path`` read local rows in
its schema: ``prompt`` (the threat-hunting request) and ``rule`` (the gold Sigma rule as YAML). A gold rule that
is not a valid rule (``sigma_rules.parse_rule``) stops the environment with one line naming the file, row and
field. A local training file without an evaluation file is used for both.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows
from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig

try:
    from environments.community.cybersecurity_sigma.sigma_rules import parse_rule, read_rule
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from sigma_rules import parse_rule, read_rule

DATASET = "mmaisel1/nous-rl-hackathon-sigma"
SYSTEM_PROMPT = """You are a systematic, deep-reasoning AI that solves detection-engineering problems by writing
Sigma rules. First think the problem through inside <think> </think> tags, then give your final Sigma rule as YAML
inside a LaTeX \\boxed{...}.

Output format:
<think>
Step-by-step reasoning: the Sigma syntax, the threat-detection context and why you chose each field.
</think>

\\boxed{
<YAML Sigma rule>
}

Rules:
- All your thoughts go inside the <think> tags.
- Your final YAML answer goes inside \\boxed{...}, and nothing else follows it.
- The boxed content is pure YAML (no bullets, backticks or markdown), readable by yaml.safe_load().
- You have at most 2048 tokens: be detailed but concise.
- Use Sigma best practices: logsource, detection.selection, detection.condition, and timeframe when fitting.

Example:
<think>
Lateral movement shows as many outbound connections from one source. The condition counts destination IPs per
source IP over firewall logs where the action is denied.
</think>

\\boxed{
detection:
  condition: selection | count(dst_ip) by src_ip > 10
  selection:
    action: denied
  timeframe: 24h
logsource:
  category: firewall
}"""


@dataclass(frozen=True)
class SigmaTask:
    """A request (``prompt``), its gold rule text and the parsed gold rule."""

    prompt: str
    rule_text: str
    rule: dict[str, Any]


def tasks_from_rows(rows: Sequence[dict[str, Any]], source: str) -> list[SigmaTask]:
    """Tasks of rows in the hub set's schema; :class:`DatasetError` naming the source, row and field for a
    non-text field or a gold rule that is not a valid rule."""
    tasks = []
    for index, row in enumerate(rows):
        for name in ("prompt", "rule"):
            if not isinstance(row[name], str) or not row[name].strip():
                raise DatasetError(f"{source}: row {index}: field {name!r} must be non-empty text")
        reading = parse_rule(row["rule"])
        if reading.rule is None:
            raise DatasetError(
                f"{source}: row {index}: field 'rule' is not a valid Sigma rule: {reading.error}"
            )
        tasks.append(SigmaTask(row["prompt"].strip(), row["rule"], reading.rule))
    return tasks


class SigmaEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the data source."""

    dataset_path: Optional[str] = Field(None, description="local rows (prompt, rule)")
    eval_dataset_path: Optional[str] = Field(
        None, description="local evaluation rows (default: dataset_path when that is set)"
    )


class SigmaRuleBase(DeclaredDefaults, SingleTurnEnv):
    """Data and prompt of the Sigma-rule environments; subclasses score the rules."""

    env_config_cls = SigmaEnvConfig
    config: SigmaEnvConfig
    default_model = "NousResearch/DeepHermes-3-Llama-3-3B-Preview"
    default_env_values = dict(
        group_size=8, total_steps=1000, batch_size=12, steps_per_eval=100, max_token_length=2048
    )

    def _tasks(self, path: Optional[str], split: str) -> list[SigmaTask]:
        name = f"{DATASET} ({split})"
        rows = load_rows(path, hub_split(DATASET, split), ("prompt", "rule"), name)
        tasks = tasks_from_rows(rows, path or name)
        random.Random(42).shuffle(tasks)
        return tasks

    async def setup(self) -> None:
        cfg = self.config
        self.train = self._tasks(cfg.dataset_path, "train")
        self.test = self._tasks(cfg.eval_dataset_path or cfg.dataset_path, "test")

    def prompt_messages(self, item: SigmaTask) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": item.prompt}]

    def eval_sample_fields(self, item: SigmaTask) -> dict[str, Any]:
        return {"prompt": item.prompt, "gold_rule": item.rule_text}

    def rule_fields(self, reply: str) -> dict[str, Any]:
        """Whether the reply's rule was read, and why not."""
        reading = read_rule(reply)
        return {"valid_rule": reading.rule is not None, "rule_error": reading.error}
