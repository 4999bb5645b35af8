"""Verifiable instructions (IFEval): follow every formatting, length, keyword and language instruction.

Data: by default ``allenai/RLVR-IFeval`` (train split) for training and ``google/IFEval`` (its one
split, 541 prompts) for evaluation. ``--env.dataset_path FILE`` (and ``--env.eval_dataset_path``) reads a
local file (JSONL, JSON, Parquet or CSV) in IFEval's schema: ``key``, ``prompt``, ``instruction_id_list``
and ``kwargs`` (one dict per instruction; null values mean "not given", as on the hub). Rows in
RLVR-IFeval's shape (``messages`` and a ``ground_truth`` JSON string) load too and become one
instruction each. A local training file without an evaluation file is used for both. An unknown
instruction id, a missing argument or a missing field stops the environment at setup with one line
naming the file, the row and the problem.

Prompt: our system prompt, then the row's prompt. Reward: the share of the row's instructions the reply
follows, checked strictly on the reply after its think block (:mod:`atroposlib.utils.ifeval`); a reply
whose think block never closes, or an empty reply, follows nothing.

Training order (atroposlib 0.4.0's curriculum): the training items form a queue; an item whose group
averages above ``max_group_average_for_training`` (0.75) or at least 0.9, or, with
``solve_on_single_correct``, has any reply following every instruction, counts as solved and leaves the
queue; any other item goes back to its end. When every item is solved the queue starts again with all of
them. Groups averaging above ``max_group_average_for_training`` are not trained on (too easy).
``test_set_ratio`` holds that share of the (shuffled, ``dataset_shuffle_seed``) training rows out for
evaluation instead of the evaluation set, as 0.4.0 did.

Evaluation reports IFEval's four accuracies: ``eval/prompt_level_strict_acc`` (every instruction of a
prompt followed), ``eval/inst_level_strict_acc`` (share of all instructions followed), and their loose
variants ``eval/prompt_level_loose_acc`` / ``eval/inst_level_loose_acc`` (the reply also tried without
its first line, its last line, both, and without ``*``).

``python environments/instruction_following_algorithm_environment.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from pydantic import Field

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows
from atroposlib.envs.env_config import ORIGINAL_DUMP_AND_LOG_KEYS
from atroposlib.envs.groups import ScoredDataGroup
from atroposlib.envs.reporting import summary_line
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.ifeval import (
    BoundInstruction,
    InstructionError,
    bind_instructions,
    grade_reply,
    rlvr_instruction,
    rlvr_prompt,
)

IFEVAL_FIELDS = ("prompt", "instruction_id_list", "kwargs")
RLVR_FIELDS = ("messages", "ground_truth")

system_prompt = (
    "You are a deep thinking AI. You may reason at length before answering: put your thoughts inside "
    "<think> </think> tags, then write your response.\n\n"
    "The request comes with instructions about the form of the response (its length, format, words, "
    "language, beginning or ending). Follow every one of them exactly; only the text after your "
    "thinking is checked."
)


@dataclass(frozen=True)
class IFEvalItem:
    """One prompt and its bound instructions."""

    key: Union[int, str]
    prompt: str
    instructions: tuple[BoundInstruction, ...]

    @property
    def instruction_ids(self) -> list[str]:
        return [instruction.id for instruction in self.instructions]


class IFConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus where the training and evaluation prompts come from."""

    dataset_name: str = Field("allenai/RLVR-IFeval", description="hub data set to train on")
    dataset_config: Optional[str] = Field(None, description="configuration of the training hub data set")
    dataset_split: str = Field("train", description="hub split to train on")
    eval_dataset_name: str = Field("google/IFEval", description="hub data set to evaluate on")
    eval_dataset_config: Optional[str] = Field(
        None, description="configuration of the evaluation hub data set"
    )
    eval_split: str = Field("train", description="hub split to evaluate on")
    dataset_path: Optional[str] = Field(
        None, description="local file of IFEval (or RLVR-IFeval) rows used instead of the training hub set"
    )
    eval_dataset_path: Optional[str] = Field(
        None, description="local file for evaluation (default: dataset_path when that is set)"
    )
    test_set_ratio: Optional[float] = Field(
        None,
        gt=0.0,
        lt=1.0,
        description="hold this share of the training rows out for evaluation instead of "
        "the evaluation set (0.4.0's split; unset: evaluate on eval_dataset_name / eval_dataset_path)",
    )
    dataset_shuffle_seed: int = Field(42, description="seed of the shuffle of the training rows")
    max_group_average_for_training: float = Field(
        0.75,
        ge=0.0,
        le=1.0,
        description="a group averaging above this is not trained on and its item is solved",
    )
    solve_on_single_correct: bool = Field(
        False,
        description="an item is solved (leaves the queue) as soon as one reply follows every instruction",
    )

    original_key_aliases = {"dataset_config_name": "dataset_config"}
    unsupported_original_keys = {
        **ORIGINAL_DUMP_AND_LOG_KEYS,
        "resume_from_unsolved_dataset": "0.4.0 resumed from its own dump of unsolved items; the queue here "
        "restarts from the training set",
    }


def _missing(row: dict[str, Any], fields: Sequence[str]) -> Optional[str]:
    return next((field for field in fields if row.get(field) is None), None)


def row_to_item(row: dict[str, Any], index: int, source: str) -> IFEvalItem:
    """The item of one IFEval row or RLVR-IFeval row (told apart by ``ground_truth``).

    Raises :class:`DatasetError` naming ``source``, the row and the missing field, unknown instruction
    id or bad argument.
    """
    rlvr = "ground_truth" in row
    missing = _missing(row, RLVR_FIELDS if rlvr else IFEVAL_FIELDS)
    if missing:
        raise DatasetError(f"{source}: row {index}: missing field {missing!r}")
    try:
        if rlvr:
            prompt = rlvr_prompt(row["messages"])
            instruction_id, kwargs = rlvr_instruction(row["ground_truth"])
            instructions = bind_instructions([instruction_id], [kwargs])
        else:
            prompt = row["prompt"]
            instructions = bind_instructions(list(row["instruction_id_list"]), list(row["kwargs"]))
    except InstructionError as exc:
        raise DatasetError(f"{source}: row {index}: {exc}") from None
    except TypeError:
        raise DatasetError(f"{source}: row {index}: instruction_id_list and kwargs must be lists") from None
    if not isinstance(prompt, str) or not prompt.strip():
        raise DatasetError(f"{source}: row {index}: empty prompt")
    return IFEvalItem(key=row.get("key", index), prompt=prompt, instructions=instructions)


def rows_to_items(rows: list[dict[str, Any]], source: str) -> list[IFEvalItem]:
    """Items of all rows (see :func:`row_to_item`)."""
    return [row_to_item(row, index, source) for index, row in enumerate(rows)]


def evaluation_metrics(samples: Sequence[dict[str, Any]]) -> dict[str, float]:
    """IFEval's prompt- and instruction-level accuracies, strict and loose, from graded samples.

    Each sample holds ``strict`` and ``loose``: one verdict per instruction of its prompt.
    """
    metrics: dict[str, float] = {}
    if not samples:
        return metrics
    for kind in ("strict", "loose"):
        verdicts = [sample[kind] for sample in samples]
        flat = [verdict for prompt in verdicts for verdict in prompt]
        metrics[f"eval/prompt_level_{kind}_acc"] = sum(all(v) for v in verdicts) / len(verdicts)
        metrics[f"eval/inst_level_{kind}_acc"] = sum(flat) / len(flat)
    return metrics


class InstructionFollowingEnv(LocalServerDefaults, SingleTurnEnv):
    """Rewards the share of a prompt's verifiable instructions a reply follows; evaluates on IFEval."""

    name = "instruction_following"
    env_config_cls = IFConfig
    config: IFConfig
    default_server_port = 9004

    @classmethod
    def default_env_config(cls) -> IFConfig:
        return IFConfig(
            group_size=32,
            total_steps=500,
            batch_size=1024,
            steps_per_eval=20,
            max_token_length=1024 * 15,
            wandb_name="instruction_following_rlvr_ifeval",
            temperature=0.8,
        )

    def __init__(self, config: IFConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.active_train_queue: deque[IFEvalItem] = deque()
        self.solved_items: list[IFEvalItem] = []

    def _load(self) -> tuple[list[IFEvalItem], list[IFEvalItem]]:
        cfg = self.config
        train_hub = hub_split(cfg.dataset_name, cfg.dataset_split, cfg.dataset_config)
        rows = load_rows(cfg.dataset_path, train_hub, [], cfg.dataset_name)
        train = rows_to_items(rows, cfg.dataset_path or cfg.dataset_name)
        random.Random(cfg.dataset_shuffle_seed).shuffle(train)
        if cfg.test_set_ratio is not None:
            if len(train) < 2:
                raise DatasetError(
                    f"{cfg.dataset_path or cfg.dataset_name}: test_set_ratio needs at least 2 rows, got {len(train)}"
                )
            held = min(max(1, round(len(train) * cfg.test_set_ratio)), len(train) - 1)
            return train[held:], train[:held]
        eval_path = cfg.eval_dataset_path or cfg.dataset_path
        eval_hub = hub_split(cfg.eval_dataset_name, cfg.eval_split, cfg.eval_dataset_config)
        eval_rows = load_rows(eval_path, eval_hub, [], cfg.eval_dataset_name)
        test = rows_to_items(eval_rows, eval_path or cfg.eval_dataset_name)
        return train, test

    async def setup(self) -> None:
        self.train, self.test = self._load()
        self.active_train_queue = deque(self.train)
        self.solved_items = []

    async def get_next_item(self) -> IFEvalItem:
        """The front of the queue of unsolved items; once every item is solved, the queue starts again."""
        if not self.active_train_queue:
            self.active_train_queue = deque(self.solved_items or self.train)
            self.solved_items = []
        self.iter += 1
        return self.active_train_queue.popleft()

    def is_solved(self, scores: Sequence[float]) -> bool:
        """Whether a group's scores solve its item (see the module docstring)."""
        if not scores:
            return False
        if self.config.solve_on_single_correct and any(score >= 1.0 for score in scores):
            return True
        average = sum(scores) / len(scores)
        return average > self.config.max_group_average_for_training or average >= 0.9

    def on_group_scored(self, item: IFEvalItem, scores: Sequence[float]) -> None:
        (self.solved_items if self.is_solved(scores) else self.active_train_queue).append(item)

    async def collect_trajectories(self, item: IFEvalItem) -> tuple[Optional[ScoredDataGroup], list]:
        group, backlog = await super().collect_trajectories(item)
        if (
            group is not None
            and sum(group["scores"]) / len(group["scores"]) > self.config.max_group_average_for_training
        ):
            self.record_group_scores(group["scores"], kept=False, equal_scores=False)
            return None, backlog
        return group, backlog

    def prompt_messages(self, item: IFEvalItem) -> list[dict[str, str]]:
        return [{"role": "system", "content": system_prompt}, {"role": "user", "content": item.prompt}]

    def score_reply(self, reply: str, item: IFEvalItem) -> float:
        """The share of the item's instructions the reply follows strictly."""
        return grade_reply(reply, item.instructions).strict_fraction

    def eval_sample_fields(self, item: IFEvalItem) -> dict[str, Any]:
        return {"key": item.key, "prompt": item.prompt, "instruction_id_list": item.instruction_ids}

    async def _eval_one(self, item: IFEvalItem, sem: asyncio.Semaphore) -> dict[str, Any]:
        """The evaluation sample with the reply's strict and loose verdicts, one per instruction."""
        sample = await super()._eval_one(item, sem)
        grade = grade_reply(sample["messages"][-1]["content"], item.instructions)
        return {**sample, "strict": list(grade.strict), "loose": list(grade.loose)}

    def evaluation_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """IFEval's four accuracies (see :func:`evaluation_metrics`)."""
        return evaluation_metrics(samples)

    def evaluation_summary(self, metrics: dict[str, float], samples: Sequence[dict[str, Any]]) -> str:
        return summary_line(self.name, len(samples), "prompts", metrics)


if __name__ == "__main__":
    InstructionFollowingEnv.cli()
