"""Reasoning Gym: procedurally generated reasoning tasks from the ``reasoning-gym`` package, scored by each
task's own ``score_answer``.

Tasks: ``--env.tasks`` lists reasoning-gym dataset names (``["chain_sum", "leg_counting"]``), or entries
``{"name": ..., "weight": ..., "config": {...}}`` where ``weight`` sets how often the task is drawn (relative
to the others) and ``config`` holds the task's own settings (``{"min_animals": 2}``); ``["all"]`` takes every
registered dataset. An unknown name stops the environment at start-up with one line.

Items are deterministic: training item ``i`` picks its task from ``seed`` and ``i`` (by weight) and is item
``i`` of that task's dataset generated with ``seed``. The evaluation set holds ``num_eval_samples_per_task``
items of every task generated with ``eval_seed`` at the task's configured difficulty, and training items that
repeat an evaluation question are skipped.

Difficulty (``--env.complexity_mode``), for tasks with a reasoning-gym curriculum (others keep their
config):

* unset: the task's configuration as given;
* ``curriculum``: every task starts at curriculum level ``curriculum_start_level``; after each
  ``curriculum_window`` scored replies of a task, its level goes up one when the share of fully correct
  replies is at least ``curriculum_target_accuracy`` and down one when it is below
  ``curriculum_demote_accuracy``. A level sets every curriculum attribute to that level (capped at the
  attribute's highest); the levels are saved in environment checkpoints and logged as
  ``train/curriculum_level/<task>``;
* ``random``: each training item draws a level uniformly between 0 and the task's highest.

In the two curriculum modes the curriculum's attributes override the same fields of a task's ``config``.

Reply form: optional reasoning in ``<think>...</think>``, then the final answer inside
``<answer>...</answer>`` exactly once (the same answer repeated is accepted). The reward is the task's
``score_answer`` of that answer (1.0 right, some tasks give partial credit in between), and 0.0 when there is no
answer tag after the reasoning, the tags hold different answers, or scoring fails. A reply counts as correct
(``train/percent_correct``, ``eval/percent_correct``) when it scores 1.0.

``python environments/reasoning_gym_environment.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import logging
import random
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, Field, field_validator

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.env_config import ORIGINAL_DUMP_AND_LOG_KEYS
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import answer_section

logger = logging.getLogger(__name__)

DEFAULT_TASKS = [
    "basic_arithmetic",
    "chain_sum",
    "leg_counting",
    "gcd",
    "lcm",
    "prime_factorization",
    "fraction_simplification",
    "base_conversion",
    "count_bits",
    "letter_counting",
    "spell_backward",
    "word_sorting",
    "caesar_cipher",
    "number_sorting",
    "simple_equations",
    "calendar_arithmetic",
    "family_relationships",
    "knights_knaves",
    "syllogism",
    "mini_sudoku",
    "maze",
]
SYSTEM_PROMPT = (
    "You may think before answering: put your reasoning inside <think> </think> tags. After the reasoning, "
    "give your final answer inside <answer> </answer> tags, exactly once, in the form the question asks for. "
    "You may add a short explanation outside the tags."
)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_HELD_OUT_RETRIES = 20
_DATASET_CACHE_SIZE = 256


class TaskSpec(BaseModel):
    """One reasoning-gym task: its dataset ``name``, draw ``weight`` and dataset ``config`` overrides."""

    name: str = Field(description="reasoning-gym dataset name, e.g. chain_sum")
    weight: float = Field(1.0, gt=0.0, description="relative frequency among the tasks")
    config: dict[str, Any] = Field(default_factory=dict, description="settings of the task's dataset config")


def registered_tasks() -> list[str]:
    """Every dataset name reasoning-gym registers."""
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def extract_answer(reply: str) -> Optional[str]:
    """The one ``<answer>`` of a reply after its reasoning, stripped; None when absent, empty or ambiguous."""
    section = answer_section(reply)
    if section is None:
        return None
    answers = {a.strip() for a in _ANSWER_TAG.findall(section)}
    if len(answers) != 1:
        return None
    answer = answers.pop()
    return answer or None


class ReasoningGymEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the task list, seeds and difficulty control."""

    tasks: list[Union[str, TaskSpec]] = Field(
        default_factory=lambda: list(DEFAULT_TASKS),
        description='reasoning-gym dataset names or {"name", "weight", "config"} entries; ["all"] for every task',
    )
    seed: int = Field(42, description="seed of the training items")
    eval_seed: int = Field(123, description="seed of the evaluation items (held out of training)")
    num_eval_samples_per_task: int = Field(5, ge=1, description="evaluation items per task")
    dataset_size: int = Field(
        100_000, ge=1, description="items per task dataset; training item i uses index i modulo this"
    )
    complexity_mode: Optional[Literal["curriculum", "random"]] = Field(
        None, description="difficulty: unset (task config), curriculum (adaptive) or random (per item)"
    )
    curriculum_start_level: int = Field(0, ge=0, description="curriculum level every task starts at")
    curriculum_target_accuracy: float = Field(
        0.7,
        ge=0.0,
        le=1.0,
        description="promote a task when this share of its recent replies is fully correct",
    )
    curriculum_demote_accuracy: float = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description="demote a task when fewer than this share of its recent replies are correct",
    )
    curriculum_window: int = Field(32, ge=1, description="scored replies of a task between level decisions")

    unsupported_original_keys = {
        **ORIGINAL_DUMP_AND_LOG_KEYS,
        "mask_too_long_completions": "not implemented here: a reply cut at its budget is scored and trained "
        "like any other",
    }

    @field_validator("tasks")
    @classmethod
    def _known_tasks(cls, tasks: list[Union[str, TaskSpec]]) -> list[Union[str, TaskSpec]]:
        if not tasks:
            raise ValueError("list at least one reasoning-gym task")
        known = registered_tasks()
        names = [t if isinstance(t, str) else t.name for t in tasks]
        if names == ["all"]:
            return list(known)
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(
                f"unknown reasoning-gym task(s) {', '.join(unknown)}; registered: {', '.join(known)}"
            )
        if len(set(names)) != len(names):
            raise ValueError("a task is listed twice")
        return tasks

    def task_specs(self) -> list[TaskSpec]:
        """The tasks as :class:`TaskSpec` entries."""
        return [TaskSpec(name=t) if isinstance(t, str) else t for t in self.tasks]


@dataclass
class GymItem:
    """One question: the ``task``, the curriculum ``level`` (None: task config) and ``seed`` of the dataset that
    generated it, and the dataset ``entry``."""

    task: str
    level: Optional[int]
    seed: int
    entry: dict[str, Any] = field(repr=False)

    @property
    def question(self) -> str:
        return self.entry["question"]


class ReasoningGymEnv(LocalServerDefaults, SingleTurnEnv):
    """Rewards answers to reasoning-gym tasks with the task's own scorer, with optional curricula."""

    name = "reasoning_gym"
    env_config_cls = ReasoningGymEnvConfig
    config: ReasoningGymEnvConfig

    def __init__(self, config: ReasoningGymEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.specs = {spec.name: spec for spec in config.task_specs()}
        self._names = list(self.specs)
        self._weights = [spec.weight for spec in self.specs.values()]
        self.curriculum_levels: dict[str, int] = {}
        self.recent_scores: dict[str, list[float]] = {}
        self.test_items: list[GymItem] = []
        self._eval_questions: set[tuple[str, str]] = set()
        self._curricula: dict[str, Any] = {}
        self._datasets: OrderedDict[tuple, Any] = OrderedDict()

    @classmethod
    def default_env_config(cls) -> ReasoningGymEnvConfig:
        return ReasoningGymEnvConfig(
            group_size=8,
            total_steps=250,
            batch_size=256,
            steps_per_eval=25,
            max_token_length=8192,
            eval_temperature=0.2,
        )

    # -- datasets and curricula -------------------------------------------------------------------------
    def _curriculum(self, task: str) -> Optional[Any]:
        from reasoning_gym.factory import create_curriculum, has_curriculum

        if task not in self._curricula:
            self._curricula[task] = create_curriculum(task) if has_curriculum(task) else None
        return self._curricula[task]

    def max_level(self, task: str) -> int:
        """The highest curriculum level of ``task`` (0 without a curriculum)."""
        curriculum = self._curriculum(task)
        if curriculum is None:
            return 0
        return max(len(attr.levels) for attr in curriculum.attributes.values()) - 1

    def dataset(self, task: str, level: Optional[int], seed: int) -> Any:
        """The reasoning-gym dataset of ``task`` at curriculum ``level`` (None: the task config) and ``seed``."""
        key = (task, level, seed)
        if key in self._datasets:
            self._datasets.move_to_end(key)
            return self._datasets[key]
        from reasoning_gym.factory import DATASETS, create_dataset

        settings = {**self.specs[task].config, "seed": seed, "size": self.config.dataset_size}
        curriculum = self._curriculum(task) if level is not None else None
        try:
            if curriculum is None:
                built = create_dataset(task, **settings)
            else:
                for attr_name, attr in curriculum.attributes.items():
                    curriculum.set_attr_level(attr_name, min(level, len(attr.levels) - 1))
                config = curriculum.generate_configuration(settings)
                if hasattr(config, "validate"):
                    config.validate()
                built = DATASETS[task][0](config=config)
        except Exception as exc:
            raise ValueError(f"reasoning-gym task {task!r}: cannot build its dataset: {exc}") from None
        self._datasets[key] = built
        if len(self._datasets) > _DATASET_CACHE_SIZE:
            self._datasets.popitem(last=False)
        return built

    def _train_level(self, task: str, rng: random.Random) -> Optional[int]:
        mode = self.config.complexity_mode
        if mode is None or self._curriculum(task) is None:
            return None
        if mode == "random":
            return rng.randint(0, self.max_level(task))
        return self.curriculum_levels.setdefault(
            task, min(self.config.curriculum_start_level, self.max_level(task))
        )

    # -- environment hooks ------------------------------------------------------------------------------
    async def setup(self) -> None:
        cfg = self.config
        self.test_items = []
        for task in self.specs:
            data = self.dataset(task, None, cfg.eval_seed)
            for index in range(min(cfg.num_eval_samples_per_task, cfg.dataset_size)):
                self.test_items.append(GymItem(task, None, cfg.eval_seed, data[index]))
        self._eval_questions = {(item.task, item.question) for item in self.test_items}

    def train_item(self, index: int) -> GymItem:
        """Training item number ``index`` (deterministic for the configuration and the curriculum levels)."""
        rng = random.Random(f"reasoning-gym:{self.config.seed}:{index}")
        task = rng.choices(self._names, weights=self._weights)[0]
        level = self._train_level(task, rng)
        data = self.dataset(task, level, self.config.seed)
        position = index
        for _ in range(_HELD_OUT_RETRIES):
            entry = data[position % self.config.dataset_size]
            if (task, entry["question"]) not in self._eval_questions:
                break
            position += 1_000_003
        return GymItem(task, level, self.config.seed, entry)

    async def get_next_item(self) -> GymItem:
        item = self.train_item(self.iter)
        self.iter += 1
        return item

    def prompt_messages(self, item: GymItem) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": item.question}]

    def score_reply(self, reply: str, item: GymItem) -> float:
        answer = extract_answer(reply)
        if answer is None:
            return 0.0
        try:
            score = float(self.dataset(item.task, item.level, item.seed).score_answer(answer, item.entry))
        except Exception as exc:  # a task's scorer failing on odd input must not stop the environment
            logger.warning("reasoning-gym task %s: score_answer failed (%s); scoring 0", item.task, exc)
            return 0.0
        return min(max(score, 0.0), 1.0)

    def eval_items(self) -> list[GymItem]:
        return self.test_items

    def eval_sample_fields(self, item: GymItem) -> dict:
        return {"task": item.task, "question": item.question, "gold_answer": item.entry.get("answer")}

    def on_group_scored(self, item: GymItem, scores) -> None:
        current = self.curriculum_levels.get(item.task)
        if self.config.complexity_mode != "curriculum" or item.level is None or item.level != current:
            return  # only replies to questions of the task's current level count towards its next decision
        window = self.recent_scores.setdefault(item.task, [])
        window.extend(1.0 if s >= 1.0 else 0.0 for s in scores)
        if len(window) < self.config.curriculum_window:
            return
        accuracy = sum(window) / len(window)
        level = current
        if accuracy >= self.config.curriculum_target_accuracy:
            level = min(level + 1, self.max_level(item.task))
        elif accuracy < self.config.curriculum_demote_accuracy:
            level = max(level - 1, 0)
        self.curriculum_levels[item.task] = level
        self.recent_scores[item.task] = []

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        wandb_metrics = dict(wandb_metrics or {})
        for task, level in self.curriculum_levels.items():
            wandb_metrics[f"train/curriculum_level/{task}"] = level
        await super().wandb_log(wandb_metrics)

    def save_checkpoint(self, step, data=None) -> None:
        data = dict(data or {})
        data["curriculum_levels"] = dict(self.curriculum_levels)
        super().save_checkpoint(step, data)


if __name__ == "__main__":
    ReasoningGymEnv.cli()
