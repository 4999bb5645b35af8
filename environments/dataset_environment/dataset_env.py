"""Any dataset, configured by YAML alone: prompt and answer fields, system prompt, and rewards from the registry.

    python environments/dataset_environment/dataset_env.py process --config environments/configs/dataset_env_gsm8k.yaml

The ``env:`` section of the ``--config`` file (or ``--env.*`` flags) names the data and the rewards:

* data: ``dataset_name`` (hub set), ``dataset_config``, ``split``; or ``dataset_path`` (a local JSONL, JSON,
  Parquet or CSV file, which then also serves for evaluation unless ``eval_dataset_path`` is given);
  ``prompt_field`` (required), ``answer_field`` and ``ground_truth_field`` (optional; every row must have the
  fields that are set, or the environment stops with one line naming the file, the row and the field);
* evaluation: ``eval_dataset_path``; or ``eval_dataset_name`` / ``eval_dataset_config`` / ``eval_split`` (with
  only ``eval_split``, that split of ``dataset_name``). Without any, ``evaluate`` has nothing to do;
* prompt: ``system_prompt``, and ``prefill`` (text the reply starts with, e.g. ``"<think>\\n"``);
* ``reward_functions``: names from the reward registry (``atroposlib.envs.reward_fns``), each a plain name or a
  mapping ``{type: accuracy, weight: 1.0, params: {...}}`` (``name:`` may stand for ``type:``). Several are
  summed, each times its weight. An unknown name stops the environment at start-up with one line listing the
  registered names. Every reward gets the row's answer as ``solution`` and its ground truth as
  ``ground_truth``.

Settings of atroposlib 0.4.0's dataset environment: ``length_warmup_steps`` grows the reply budget from
``min_tokens`` to ``max_tokens`` over that many trainer steps; ``include_messages_in_scoring: false`` sends
groups without their messages; ``debug_mode`` logs at DEBUG level; ``max_generations_per_prompt`` is
accepted and has no effect (as in 0.4.0, where one reply was sampled per call). 0.4.0's flat files (every
setting at the top level, servers under ``server_configs``) are read as they are with ``--config``.

Reply form (``strict_reply_form``, on by default): a reply whose ``<think>`` block is malformed (unclosed, or
several) or whose answer part holds different ``\\boxed{}`` answers scores 0 whatever the rewards say, since
those are the first reward hacks a model finds. A reply counts as correct in ``eval/percent_correct`` when its
reward is at least ``eval_correct_threshold``; ``eval/mean_score`` is the mean reward. Groups whose rewards
are all equal are dropped.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Optional, Union

from pydantic import Field, field_validator

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import hub_split, load_rows
from atroposlib.envs.reward_fns import CombinedReward, RewardFunction, registry
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import answer_section, boxed_answers, final_boxed_answer

RewardSpec = Union[str, dict[str, Any]]
logger = logging.getLogger(__name__)


def normalize_reward_spec(entry: RewardSpec) -> RewardSpec:
    """A ``reward_functions`` entry in the registry's form: a name, or a dict with ``type`` (``name`` accepted).

    Raises ValueError for a mapping without ``type``/``name`` or an entry of another kind.
    """
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict):
        spec = dict(entry)
        if "type" not in spec:
            if "name" not in spec:
                raise ValueError(f"reward entry {entry!r} needs a 'type' (or 'name')")
            spec["type"] = spec.pop("name")
        return spec
    raise ValueError(f"reward entry {entry!r} must be a name or a mapping")


def build_reward(specs: list[RewardSpec]) -> RewardFunction:
    """One reward function for the (normalised) specs: the single one, or their weighted sum."""
    if len(specs) == 1:
        return registry.create(specs[0])
    return CombinedReward(rewards=list(specs))


def reply_form_ok(reply: str) -> bool:
    """False for a malformed think block or for different boxed answers after it (a hedge)."""
    section = answer_section(reply)
    if section is None:
        return False
    return not boxed_answers(section) or final_boxed_answer(reply) is not None


class DatasetEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus where the rows come from, how they become prompts, and the rewards."""

    dataset_name: Optional[str] = Field(None, description="hub dataset name (datasets.load_dataset)")
    dataset_config: Optional[str] = Field(None, description="hub dataset configuration name")
    split: str = Field("train", description="hub split used for training")
    dataset_path: Optional[str] = Field(
        None,
        description="local JSONL/JSON/Parquet/CSV file used instead of dataset_name (and for evaluation)",
    )
    prompt_field: Optional[str] = Field(None, description="row field holding the prompt (required)")
    answer_field: Optional[str] = Field(None, description="row field holding the answer (passed as solution)")
    ground_truth_field: Optional[str] = Field(
        None, description="row field holding the canonical answer (passed as ground_truth)"
    )
    system_prompt: Optional[str] = Field(None, description="system message before every prompt")
    prefill: Optional[str] = Field(None, description="text the reply starts with (e.g. '<think>\\n')")
    shuffle_dataset: bool = Field(True, description="shuffle the training rows (seeded)")
    seed: int = Field(42, description="seed of the shuffle")
    reward_functions: list[RewardSpec] = Field(
        default_factory=lambda: ["accuracy"],
        description="reward registry names or {type|name, weight, params} mappings; several are summed",
    )
    strict_reply_form: bool = Field(
        True, description="score 0 for a malformed think block or different boxed answers in one reply"
    )
    eval_dataset_name: Optional[str] = Field(None, description="hub dataset for evaluation")
    eval_dataset_config: Optional[str] = Field(None, description="hub dataset configuration for evaluation")
    eval_split: Optional[str] = Field(None, description="hub split for evaluation")
    eval_dataset_path: Optional[str] = Field(None, description="local file for evaluation")
    eval_correct_threshold: float = Field(
        1.0, description="an evaluation reply is correct at this reward or more"
    )
    include_messages_in_scoring: Optional[bool] = Field(
        None, description="false: groups carry no messages (unset or true: they do, as always here)"
    )
    debug_mode: bool = Field(False, description="log this environment's steps at DEBUG level")
    length_warmup_steps: int = Field(
        0, ge=0, description="trainer steps over which the reply budget grows from min_tokens to max_tokens"
    )
    min_tokens: int = Field(0, ge=0, description="reply budget at step 0 when length_warmup_steps is set")

    ignored_original_keys = {
        "max_generations_per_prompt": "0.4.0's dataset environment sampled one reply per call whatever it said; "
        "group_size sets the replies per prompt",
    }
    temperature: float = Field(0.7, ge=0.0, description="sampling temperature of training rollouts")
    top_p: float = Field(0.9, gt=0.0, le=1.0, description="nucleus-sampling mass of training rollouts")

    @field_validator("reward_functions")
    @classmethod
    def _known_rewards(cls, entries: list[RewardSpec]) -> list[RewardSpec]:
        if not entries:
            raise ValueError(
                f"list at least one reward function; registered: {', '.join(registry.available_names())}"
            )
        specs = [normalize_reward_spec(e) for e in entries]
        available = registry.available_names()
        for spec in specs:
            name = spec if isinstance(spec, str) else spec["type"]
            if name not in available:
                raise ValueError(f"unknown reward function {name!r}; registered: {', '.join(available)}")
        return specs


class DatasetEnv(LocalServerDefaults, SingleTurnEnv):
    """Single-turn prompts from any dataset, scored by rewards from the registry."""

    name = "dataset"
    env_config_cls = DatasetEnvConfig
    config: DatasetEnvConfig

    #: 0.4.0 read this environment's settings from flat files (no env: section, servers in server_configs).
    flat_config_form = True

    def __init__(self, config: DatasetEnvConfig, server_configs, slurm=False, testing=False):
        if config.debug_mode:
            logger.setLevel(logging.DEBUG)
        if not config.prompt_field:
            raise ValueError("set env.prompt_field: the row field holding the prompt")
        if not (config.dataset_name or config.dataset_path):
            raise ValueError("set env.dataset_name (hub) or env.dataset_path (local file)")
        super().__init__(config, server_configs, slurm, testing)
        self.correct_threshold = config.eval_correct_threshold
        self.reward_function = build_reward(config.reward_functions)
        self.train_rows: list[dict[str, Any]] = []
        self.test_rows: list[dict[str, Any]] = []

    @classmethod
    def default_env_config(cls) -> DatasetEnvConfig:
        return DatasetEnvConfig(group_size=8, batch_size=256, max_token_length=4096)

    # -- data -------------------------------------------------------------------------------------------
    def _required(self) -> list[str]:
        cfg = self.config
        return [f for f in (cfg.prompt_field, cfg.answer_field, cfg.ground_truth_field) if f]

    def _eval_source(self) -> Optional[tuple[Optional[str], Optional[str], Optional[str], str]]:
        """(path, hub name, hub config, hub split) of the evaluation rows, or None for no evaluation set."""
        cfg = self.config
        if cfg.eval_dataset_path:
            return cfg.eval_dataset_path, None, None, ""
        if cfg.dataset_path:
            return cfg.dataset_path, None, None, ""
        if cfg.eval_dataset_name:
            return None, cfg.eval_dataset_name, cfg.eval_dataset_config, cfg.eval_split or "test"
        if cfg.eval_split:
            return None, cfg.dataset_name, cfg.dataset_config, cfg.eval_split
        return None

    def _load(
        self, path: Optional[str], name: Optional[str], config: Optional[str], split: str
    ) -> list[dict]:
        return load_rows(
            path, hub_split(name, split, config), required=self._required(), hub_name=f"{name} ({split})"
        )

    async def setup(self) -> None:
        cfg = self.config
        self.train_rows = self._load(cfg.dataset_path, cfg.dataset_name, cfg.dataset_config, cfg.split)
        if cfg.shuffle_dataset:
            random.Random(cfg.seed).shuffle(self.train_rows)
        source = self._eval_source()
        self.test_rows = self._load(*source) if source else []

    async def get_next_item(self) -> dict[str, Any]:
        return self.next_in_turn(self.train_rows)

    # -- task -------------------------------------------------------------------------------------------
    def prompt_messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        messages = (
            [{"role": "system", "content": self.config.system_prompt}] if self.config.system_prompt else []
        )
        messages.append({"role": "user", "content": str(row[self.config.prompt_field])})
        return messages

    def prefill(self, row: dict[str, Any]) -> str:
        return self.config.prefill or ""

    @property
    def generation_budget(self) -> int:
        """The reply budget: with ``length_warmup_steps``, ``min_tokens`` growing linearly to the full budget
        (``max_tokens``, else ``max_token_length``) over that many trainer steps; else the full budget."""
        full = super().generation_budget
        steps = self.config.length_warmup_steps
        if steps <= 0:
            return full
        progress = min(1.0, self.curr_step / steps)
        return max(1, int(self.config.min_tokens + progress * (full - self.config.min_tokens)))

    async def collect_trajectories(self, row: dict[str, Any]):
        group, backlog = await super().collect_trajectories(row)
        if group is not None and self.config.include_messages_in_scoring is False:
            group["messages"] = None
        return group, backlog

    def score_replies(self, replies, row: dict[str, Any]) -> list[float]:
        cfg = self.config
        completions = [[{"role": "assistant", "content": reply}] for reply in replies]
        rewards = self.reward_function(
            completions,
            solution=row.get(cfg.answer_field) if cfg.answer_field else None,
            ground_truth=row.get(cfg.ground_truth_field) if cfg.ground_truth_field else None,
        )
        if cfg.strict_reply_form:
            rewards = [r if reply_form_ok(reply) else 0.0 for r, reply in zip(rewards, replies, strict=True)]
        return rewards

    def eval_items(self) -> list[dict[str, Any]]:
        return self.test_rows

    def eval_sample_fields(self, row: dict[str, Any]) -> dict:
        cfg = self.config
        fields = {"prompt": row.get(cfg.prompt_field)}
        if cfg.answer_field:
            fields["gold_answer"] = row.get(cfg.answer_field)
        return fields

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        if self.wandb_run is not None:
            self.reward_function.set_wandb_logger(self.wandb_run)
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    DatasetEnv.cli()
