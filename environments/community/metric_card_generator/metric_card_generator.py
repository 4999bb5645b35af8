"""Metric card generation: the JSON configuration of a dashboard MetricCard component for a requested metric.

The prompt (the original's system prompt and one of its five request templates) names a metric, a business
domain and a time period; the reply may reason first in ``<think>...</think>`` and then gives the card as a
JSON object (in a ```json block or bare). Reward (``metric_cards.py``): 0.0 without a card that parses and
passes the schema (an unclosed reasoning block, a card only inside the reasoning, blocks that differ, extra
or mistyped fields); 0.5 for a valid card plus up to 0.25 for the original's formatting checks and up to
0.25 for content: the title names the metric, the value has the right unit, the description names the
period, the icon is a known one. Evaluation reports ``eval/mean_score``, ``eval/percent_correct`` (cards
at ``score_threshold``) and ``eval/schema_valid``; ``train/schema_valid`` is logged.

Data: none is needed: training requests are drawn as the original drew them (seeded by ``seed``), and
``eval_size`` requests drawn with ``seed + 1`` are the evaluation set. ``--env.dataset_path`` /
``--env.eval_dataset_path`` read local requests: ``prompt``, ``domain``, ``metric_type``, ``time_period``.

``python environments/community/metric_card_generator/metric_card_generator.py {serve,process,evaluate} ...``
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.data_loading import DatasetError, check_rows, read_local_rows
from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.reply_fields import ReplyFields
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig

try:
    from environments.community._judging.train_shares import TrainShares
    from environments.community.metric_card_generator.metric_cards import (
        MetricPrompt,
        prompt_from_row,
        random_prompt,
        score_card,
    )
except ModuleNotFoundError:  # run as a script: the repository root is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from environments.community._judging.train_shares import TrainShares
    from environments.community.metric_card_generator.metric_cards import (
        MetricPrompt,
        prompt_from_row,
        random_prompt,
        score_card,
    )

SYSTEM_PROMPT = """You are an AI specialized in generating JSON data for a MetricCard React component.

Create a JSON object with this structure:
```json
{
  "componentType": "metricCard",
  "props": {
    "title": "Revenue",
    "value": "$12,345",
    "description": "Total revenue this month",
    "trend": {"value": 12.5, "isPositive": true},
    "icon": "dollar"
  }
}
```

Required properties:
- componentType: exactly "metricCard"
- props.title: the metric's name
- props.value: the metric's value, formatted as text

Optional properties:
- props.description: more context about the metric
- props.trend: an object with "value" (a percentage, as a number) and "isPositive" (a boolean)
- props.icon: the name of an icon (e.g. "dollar", "users", "trending-up")
- props.className: a CSS class name for custom styling

IMPORTANT:
1. The JSON must be valid, with no other properties
2. Format values appropriately (thousands separators, currency symbols or percent signs as needed)
3. Use an icon that suits the metric
4. Keep trend values and descriptions realistic

You will receive a request describing the metric needed. Answer with the JSON."""
REQUEST_FIELDS = ("prompt", "domain", "metric_type", "time_period")


def requests_from_rows(rows: list[dict[str, Any]], source: str) -> list[MetricPrompt]:
    """Requests of local rows; :class:`DatasetError` naming the source, row and field when one is missing or
    not non-empty text."""
    check_rows(rows, REQUEST_FIELDS, source)
    for index, row in enumerate(rows):
        for name in REQUEST_FIELDS:
            if not isinstance(row[name], str) or not row[name].strip():
                raise DatasetError(f"{source}: row {index}: field {name!r} must be non-empty text")
    return [prompt_from_row(row) for row in rows]


class MetricCardEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the requests' source and the evaluation threshold."""

    dataset_path: Optional[str] = Field(None, description="local requests (default: drawn at random)")
    eval_dataset_path: Optional[str] = Field(None, description="local evaluation requests (default: drawn)")
    eval_size: int = Field(50, ge=1, description="requests drawn for evaluation without an eval file")
    seed: int = Field(0, description="seed of the drawn requests (evaluation: seed + 1)")
    score_threshold: float = Field(
        0.9, ge=0.0, le=1.0, description="score at which an evaluation card counts as correct"
    )


class MetricCardEnv(TrainShares, DeclaredDefaults, ReplyFields, SingleTurnEnv):
    """Rewards metric-card JSON by schema, formatting and content (see the module docstring)."""

    name = "metric_card_generator"
    env_config_cls = MetricCardEnvConfig
    config: MetricCardEnvConfig
    default_model = "NousResearch/DeepHermes-3-Llama-3-3B-Preview"
    default_env_values = dict(
        group_size=8, total_steps=1000, batch_size=12, steps_per_eval=100, max_token_length=1024,
        ensure_scores_are_not_same=False,
    )  # fmt: skip

    @property
    def correct_threshold(self) -> float:  # type: ignore[override]
        return self.config.score_threshold

    async def setup(self) -> None:
        cfg = self.config
        self.rng = random.Random(cfg.seed)
        if cfg.dataset_path:
            self.train = requests_from_rows(read_local_rows(cfg.dataset_path), cfg.dataset_path)
        if cfg.eval_dataset_path:
            self.test = requests_from_rows(read_local_rows(cfg.eval_dataset_path), cfg.eval_dataset_path)
        else:
            drawn = random.Random(cfg.seed + 1)
            self.test = [random_prompt(drawn) for _ in range(cfg.eval_size)]

    async def get_next_item(self) -> MetricPrompt:
        """The next local request in turn, or a freshly drawn one."""
        return self.next_in_turn(self.train) if self.train else random_prompt(self.rng)

    def prompt_messages(self, item: MetricPrompt) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": item.prompt}]

    def score_replies(self, replies: Sequence[str], item: MetricPrompt) -> list[float]:
        results = [score_card(reply, item) for reply in replies]
        if len(replies) > 1:  # a training group (evaluation scores one reply at a time)
            self.record_share("schema_valid", (r.valid for r in results))
        return [r.score for r in results]

    def eval_sample_fields(self, item: MetricPrompt) -> dict[str, Any]:
        return {"prompt": item.prompt, "metric_type": item.metric_type, "time_period": item.time_period}

    def reply_fields(self, reply: str, item: MetricPrompt) -> dict[str, Any]:
        result = score_card(reply, item)
        return {"schema_valid": result.valid, "error": result.error}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        return {"eval/schema_valid": mean([1.0 if s["schema_valid"] else 0.0 for s in samples])}


if __name__ == "__main__":
    MetricCardEnv.cli()
