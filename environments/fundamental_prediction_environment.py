"""Company fundamentals: predict whether a metric will be raised, reduced or maintained next quarter, and
by how much.

Data: by default ``datasets.load_dataset("NousResearch/company-fundamentals-prediction-lite", "default",
split="train")``, shuffled with seed 42, with ``eval_fraction`` of the rows (5%) held out for evaluation
(unless ``--env.eval_dataset_path`` names an evaluation file).
``--env.dataset_path FILE`` (and ``--env.eval_dataset_path``; JSONL, JSON, Parquet or CSV) reads local rows
in the same schema: ``context`` (the filings, news and macro data shown to the model),
``fundamental_metric`` (e.g. ``quarterly dividend per share``), ``answer`` (``raised``, ``reduced`` or
``maintained``) and ``magnitude`` (the percent change: a number or a numeric string, ``%`` allowed). A local
training file without an evaluation file is used for both. A row with a missing field, an unknown
direction or a magnitude that is not a number stops the environment with one line naming the file, the
row and the field.

Reply: after an optional ``<think>...</think>`` block, one statement
``The {metric} will be: {raised|reduced|maintained} and the magnitude will be: {p}%`` (case-insensitive,
the metric named as in the prompt). Magnitudes are compared as sizes: ``-5%`` and ``5%`` are the same
prediction, the direction word carries the sign.

Reward (in [0, 1]): 0 when the direction is wrong or there is no valid prediction (no statement, one only
inside the think block, an unclosed think block, statements with different predictions, an empty reply).
A right direction earns ``DIRECTION_WEIGHT`` (0.7) plus ``1 - DIRECTION_WEIGHT`` (0.3) times the magnitude
closeness ``max(0, 1 - |p - gold| / max(gold, 1))``: an exact magnitude scores 1.0, one off by half the
true change 0.85, one off by the true change or more 0.7.

Evaluation answers every evaluation item once and reports ``eval/direction_accuracy`` (share of right
directions, also ``eval/percent_correct``), and, over the replies whose direction was right,
``eval/magnitude_abs_error`` (mean absolute error of the predicted change in percentage points) and
``eval/magnitude_accuracy`` (mean closeness as above); ``eval/mean_score`` is the mean reward.

``python environments/fundamental_prediction_environment.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.base import EvalHandlingEnum
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import answer_section

DEFAULT_DATASET = "NousResearch/company-fundamentals-prediction-lite"
DIRECTIONS = ("raised", "reduced", "maintained")
REQUIRED_FIELDS = ("context", "fundamental_metric", "answer", "magnitude")
#: Share of the reward a right direction earns; magnitude closeness adds up to the rest.
DIRECTION_WEIGHT = 0.7

system_prompt = (
    "You are a deep thinking AI financial analyst. Reason about the evidence at length inside <think> "
    "</think> tags before you commit to a prediction, then state your prediction after the closing tag."
)

user_template = (
    "Study the company fundamentals, news and macroeconomic data below and predict whether the company's "
    "{metric} will be raised, reduced or maintained next quarter, and by what percentage it will change.\n\n"
    "End your reply with exactly one sentence in this form:\n"
    '"The {metric} will be: {{answer}} and the magnitude will be: {{percentage}}%"\n'
    'where {{answer}} is "raised", "reduced" or "maintained" and {{percentage}} is the expected size of '
    "the change (0% when maintained).\n\n"
    "Data:\n\n{context}"
)

_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)$")


@dataclass(frozen=True)
class FundamentalsItem:
    """One prediction task: the data shown, the metric, the true direction and size of the change (%)."""

    context: str
    metric: str
    direction: str
    magnitude: float


@dataclass(frozen=True)
class Prediction:
    """What a reply predicts: the direction word and the size of the change in percent."""

    direction: str
    magnitude: float


class FundamentalsEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus where the rows come from."""

    dataset_name: str = Field(DEFAULT_DATASET, description="hub data set of fundamentals prediction rows")
    dataset_config: Optional[str] = Field("default", description="configuration of the hub data set")
    dataset_split: str = Field("train", description="hub split to read")
    eval_fraction: float = Field(
        0.05, gt=0.0, lt=1.0, description="share of the hub rows held out for evaluation (seed 42)"
    )
    dataset_path: Optional[str] = Field(
        None,
        description="local file (JSONL, JSON, Parquet or CSV) of rows with context, fundamental_metric, "
        "answer and magnitude used instead of the hub set",
    )
    eval_dataset_path: Optional[str] = Field(
        None, description="local evaluation file in the same schema (default: dataset_path when that is set)"
    )


def parse_magnitude(value: Any) -> Optional[float]:
    """The size of a percent change given as a number or a numeric string (``"12.5"``, ``"-3%"``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return abs(float(value))
    text = str(value).strip().removesuffix("%").strip()
    return abs(float(text)) if _NUMBER.match(text) else None


def row_to_item(row: dict[str, Any], index: int, source: str) -> FundamentalsItem:
    """The item of one row; :class:`DatasetError` naming ``source``, the row and the field when the
    direction is not one of :data:`DIRECTIONS` or the magnitude is not a number."""
    direction = str(row["answer"]).strip().lower()
    if direction not in DIRECTIONS:
        raise DatasetError(
            f"{source}: row {index}: field 'answer' must be one of {', '.join(DIRECTIONS)}, got {row['answer']!r}"
        )
    magnitude = parse_magnitude(row["magnitude"])
    if magnitude is None:
        raise DatasetError(f"{source}: row {index}: field 'magnitude' is not a number: {row['magnitude']!r}")
    return FundamentalsItem(str(row["context"]), str(row["fundamental_metric"]).strip(), direction, magnitude)


def _statement(metric: str) -> re.Pattern[str]:
    words = r"\s+".join(re.escape(word) for word in metric.split())
    return re.compile(
        rf"The\s+{words}\s+will\s+be:\s*(raised|reduced|maintained)\s+and\s+the\s+magnitude\s+will\s+be:\s*"
        r"([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s*%",
        re.IGNORECASE,
    )


def parse_prediction(reply: str, metric: str) -> Optional[Prediction]:
    """The prediction a reply states after its reasoning, or None.

    None when the reasoning is malformed, there is no statement for ``metric`` after it, or statements
    disagree (the same statement repeated is one prediction).
    """
    section = answer_section(reply)
    if section is None:
        return None
    found = {
        Prediction(direction.lower(), abs(float(size)))
        for direction, size in _statement(metric).findall(section)
    }
    return found.pop() if len(found) == 1 else None


def magnitude_closeness(predicted: float, gold: float) -> float:
    """``max(0, 1 - |predicted - gold| / max(gold, 1))``: 1 for an exact size, 0 when off by the true
    change (or by 1 point when the true change is under 1%) or more."""
    return max(0.0, 1.0 - abs(predicted - gold) / max(gold, 1.0))


def prediction_score(prediction: Optional[Prediction], item: FundamentalsItem) -> float:
    """The reward of a prediction (see the module docstring): 0, or ``DIRECTION_WEIGHT`` plus the
    weighted magnitude closeness."""
    if prediction is None or prediction.direction != item.direction:
        return 0.0
    return DIRECTION_WEIGHT + (1.0 - DIRECTION_WEIGHT) * magnitude_closeness(
        prediction.magnitude, item.magnitude
    )


class FundamentalPredictionEnv(LocalServerDefaults, SingleTurnEnv):
    """Direction and size of a company metric's next change (see the module docstring)."""

    name = "fundamental_prediction"
    env_config_cls = FundamentalsEnvConfig
    config: FundamentalsEnvConfig
    default_server_port = 9004
    # An evaluation reply counts as correct when its direction is right.
    correct_threshold = DIRECTION_WEIGHT

    def __init__(self, config: FundamentalsEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.magnitude_error_buffer: list[float] = []

    @classmethod
    def default_env_config(cls) -> FundamentalsEnvConfig:
        return FundamentalsEnvConfig(
            group_size=16,
            max_num_workers=128,
            total_steps=2000,
            batch_size=1024,
            steps_per_eval=20,
            max_token_length=1024 * 16,
            wandb_name="fundamental_metric_prediction",
            eval_handling=EvalHandlingEnum.LIMIT_TRAIN,
            eval_limit_ratio=0.1,
            temperature=0.8,
            eval_temperature=0.2,
        )

    # -- data -------------------------------------------------------------------------------------------
    def _items(self, path: Optional[str]) -> list[FundamentalsItem]:
        cfg = self.config
        loader = hub_split(cfg.dataset_name, cfg.dataset_split, cfg.dataset_config)
        rows = load_rows(path, loader, REQUIRED_FIELDS, cfg.dataset_name)
        return [row_to_item(row, index, path or cfg.dataset_name) for index, row in enumerate(rows)]

    async def setup(self) -> None:
        cfg = self.config
        self.train = self._items(cfg.dataset_path)
        random.Random(42).shuffle(self.train)
        if cfg.eval_dataset_path:
            self.test = self._items(cfg.eval_dataset_path)
        elif cfg.dataset_path:
            self.test = list(self.train)
        else:
            held_out = max(1, round(len(self.train) * cfg.eval_fraction))
            if len(self.train) <= held_out:
                raise DatasetError(
                    f"{cfg.dataset_name}: {len(self.train)} rows, too few to hold out an evaluation set"
                )
            self.test, self.train = self.train[:held_out], self.train[held_out:]

    # -- prompting and scoring --------------------------------------------------------------------------
    def prompt_messages(self, item: FundamentalsItem) -> list[dict[str, str]]:
        user = user_template.format(metric=item.metric, context=item.context)
        return [{"role": "system", "content": system_prompt}, {"role": "user", "content": user}]

    def score_reply(self, reply: str, item: FundamentalsItem) -> float:
        prediction = parse_prediction(reply, item.metric)
        if prediction is not None and prediction.direction == item.direction:
            self.magnitude_error_buffer.append(abs(prediction.magnitude - item.magnitude))
        return prediction_score(prediction, item)

    # -- evaluation -------------------------------------------------------------------------------------
    def eval_sample_fields(self, item: FundamentalsItem) -> dict[str, Any]:
        return {
            "fundamental_metric": item.metric,
            "gold_answer": item.direction,
            "gold_magnitude": item.magnitude,
        }

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """Directional accuracy, and the magnitude error and closeness over right-direction replies."""
        errors, closeness = [], []
        for sample in samples:
            prediction = parse_prediction(sample["messages"][-1]["content"], sample["fundamental_metric"])
            if prediction is not None and prediction.direction == sample["gold_answer"]:
                errors.append(abs(prediction.magnitude - sample["gold_magnitude"]))
                closeness.append(magnitude_closeness(prediction.magnitude, sample["gold_magnitude"]))
        metrics = {"eval/direction_accuracy": len(errors) / len(samples)}
        if errors:
            metrics["eval/magnitude_abs_error"] = sum(errors) / len(errors)
            metrics["eval/magnitude_accuracy"] = sum(closeness) / len(closeness)
        return metrics

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        wandb_metrics = dict(wandb_metrics or {})
        if self.magnitude_error_buffer:
            wandb_metrics["train/magnitude_abs_error"] = sum(self.magnitude_error_buffer) / len(
                self.magnitude_error_buffer
            )
        self.magnitude_error_buffer = []
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    FundamentalPredictionEnv.cli()
