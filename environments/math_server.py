"""Competition math: reason, then give one boxed answer; answers checked with ``math_verify``.

Data: by default the real hub sets: ``zwhe99/DeepMath-103K`` (train; ``question`` / ``final_answer``,
shuffled with seed 42) for rollouts, and for evaluation MATH-500 (``HuggingFaceH4/MATH-500``, test), AIME
2024 (``HuggingFaceH4/aime_2024``, train) and AMC 2023 (``math-ai/amc23``, test), each reported on its own
(``--env.eval_sets`` picks among ``math500``, ``aime24``, ``amc23``). ``--env.dataset_path FILE`` and
``--env.eval_dataset_path FILE`` (JSONL, JSON, Parquet or CSV) read local rows in MATH-500's schema
(``problem``, ``answer``; ``solution`` and the other fields are kept out of the prompt); DeepMath rows
(``question``, ``final_answer``) and AMC rows (``question``, ``answer``) load too. A local training file
without an evaluation file is used for both; a local evaluation set is reported under its file name.

Prompt: a system prompt asking for reasoning inside ``<think> </think>`` and the final answer in
``\\boxed{}``, then the problem as the user turn.

Reward: +1 when the reply's answer equals the gold answer, -1 otherwise. The answer is what the
``\\boxed{}`` after the reasoning holds (:func:`atroposlib.utils.math_checking.reply_answers`): an answer
only inside the think block, an unboxed answer, an unclosed think block, an empty reply or boxes holding
different values score -1 (the same value boxed twice, in any form, is one answer). Equality is ``math_verify``'s (``0.5`` = ``\\frac{1}{2}``, ``\\sqrt{8}`` =
``2\\sqrt{2}``, ``(x+1)^2`` = ``x^2+2x+1``, ``x = 3`` = ``3``), computed in worker processes with a time
limit per check (``--env.check_timeout_s``): a check that runs over scores -1 and never stalls the
environment.

Judge and self-correction groups (atroposlib 0.4.0's ``percent_to_judge``, ``percent_length_penalty`` and
``mask_too_long_completions``; :mod:`atroposlib.envs.self_judging`): after a group with a right and a wrong
reply, with probability ``percent_to_judge`` the policy judges one right and one wrong answer (scored on its
verdict; on the wrong answer by how often its own self-corrections then reach the gold answer), and
self-correction groups whose scores differ are trained too. Off by default here (0.4.0's default was 0.3).

Evaluation answers every item once and reports ``eval/<set>_percent_correct`` per set,
``eval/overall_percent_correct`` and ``eval/percent_correct`` (all items); ``--env.eval_limit N`` keeps
the first N items with the sets taken in turn.

``python environments/math_server.py {serve,process,evaluate} --openai.base_url ... --openai.model_name ...``
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pydantic import Field, field_validator

from atroposlib.envs.base import EvalHandlingEnum
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import check_rows, hub_split, load_rows, read_local_rows
from atroposlib.envs.groups import ScoredDataGroup
from atroposlib.envs.self_judging import JudgeTask, SelfCorrectGroup, SelfJudgingRounds
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.math_checking import DEFAULT_TIMEOUT_S, MathChecker, gold_latex, reply_answers

DEFAULT_MODEL = "NousResearch/Hermes-4-14B"
DEFAULT_DATASET = "zwhe99/DeepMath-103K"

#: The evaluation sets on the hub: name -> (hub set, split).
HUB_EVAL_SETS: dict[str, tuple[str, str]] = {
    "math500": ("HuggingFaceH4/MATH-500", "test"),
    "aime24": ("HuggingFaceH4/aime_2024", "train"),
    "amc23": ("math-ai/amc23", "test"),
}

#: Field pairs (problem, gold answer) of the row schemas that load, tried in order.
ROW_SCHEMAS: tuple[tuple[str, str], ...] = (
    ("problem", "answer"),  # MATH-500, AIME 2024
    ("question", "final_answer"),  # DeepMath-103K
    ("question", "answer"),  # AMC 2023
)

system_prompt = (
    "You are a careful mathematician who thinks deeply before answering. Work through the problem step by "
    "step inside <think> </think> tags, checking your reasoning as you go. After the closing </think> tag, "
    "state the final answer once, in the form \\boxed{answer}. Only the boxed answer after your reasoning "
    "is graded."
)


@dataclass(frozen=True)
class MathItem:
    """One problem: its text, the gold answer as LaTeX, and the set it belongs to."""

    problem: str
    gold: str
    subset: str = "train"


class MathEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus where the problems come from and how answers are checked."""

    dataset_name: str = Field(DEFAULT_DATASET, description="hub data set of training problems")
    dataset_split: str = Field("train", description="split of the hub training set")
    dataset_path: Optional[str] = Field(
        None,
        description="local file (JSONL, JSON, Parquet or CSV) of MATH-500 rows (problem, answer) used "
        "instead of the hub training set",
    )
    eval_dataset_path: Optional[str] = Field(
        None, description="local evaluation file in the same schema (default: dataset_path when that is set)"
    )
    eval_sets: list[str] = Field(
        default_factory=lambda: list(HUB_EVAL_SETS),
        description=f"hub evaluation sets, each reported separately (any of {', '.join(HUB_EVAL_SETS)})",
    )
    run_evaluation: bool = Field(True, description="run the evaluation at all (false: evaluate does nothing)")
    check_timeout_s: float = Field(
        DEFAULT_TIMEOUT_S, gt=0, description="seconds one answer check may run before it scores as wrong"
    )
    check_workers: Optional[int] = Field(
        None, ge=1, description="worker processes checking answers (default: up to 4, at most the CPU count)"
    )
    percent_to_judge: float = Field(
        0.0, ge=0.0, le=1.0, description="share of mixed groups followed by judge and self-correction rounds"
    )
    percent_length_penalty: float = Field(
        0.0, ge=0.0, le=1.0, description="share of all-right groups scored by length instead of dropped"
    )
    mask_too_long_completions: bool = Field(
        True, description="replies cut at their token budget carry set_advantage_to_zero (not trained)"
    )

    @field_validator("eval_sets")
    @classmethod
    def _known_sets(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in HUB_EVAL_SETS]
        if unknown:
            raise ValueError(f"unknown evaluation set(s) {unknown}; choose from {list(HUB_EVAL_SETS)}")
        return value


def rows_to_items(rows: Sequence[dict[str, Any]], source: str, subset: str) -> list[MathItem]:
    """Items of ``rows`` in the first schema of :data:`ROW_SCHEMAS` the first row has.

    Raises :class:`DatasetError` naming ``source``, the row and the field when a row lacks a field of
    that schema (the MATH-500 fields when the first row fits none), or when there are no rows.
    """
    schema = next((pair for pair in ROW_SCHEMAS if rows and all(f in rows[0] for f in pair)), ROW_SCHEMAS[0])
    check_rows(rows, schema, source)
    problem_field, answer_field = schema
    return [MathItem(str(row[problem_field]), gold_latex(row[answer_field]), subset) for row in rows]


def local_set_name(path: str) -> str:
    """The name a local evaluation file is reported under: its file stem in ``[a-z0-9_]``."""
    return re.sub(r"[^a-z0-9_]+", "_", Path(path).stem.lower()).strip("_") or "local"


def interleave(sets: Sequence[Sequence[MathItem]]) -> list[MathItem]:
    """The items of all ``sets`` taken in turn (first of each, then second of each, ...)."""
    items = []
    for position in range(max((len(s) for s in sets), default=0)):
        items.extend(s[position] for s in sets if position < len(s))
    return items


class MathEnv(SelfJudgingRounds, LocalServerDefaults, SingleTurnEnv):
    """Competition math with boxed answers checked by ``math_verify`` (see the module docstring)."""

    name = "math"
    env_config_cls = MathEnvConfig
    config: MathEnvConfig
    default_model = DEFAULT_MODEL
    default_server_port = 9004

    def __init__(self, config: MathEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.checker = MathChecker(timeout_s=config.check_timeout_s, workers=config.check_workers)
        self.judge_rng = random.Random(0)

    @classmethod
    def default_env_config(cls) -> MathEnvConfig:
        return MathEnvConfig(
            group_size=16,
            batch_size=1024,
            max_num_workers_per_node=12,
            steps_per_eval=25,
            max_token_length=16384,
            eval_handling=EvalHandlingEnum.LIMIT_TRAIN,
            eval_limit_ratio=0.1,
            inference_weight=4,
            min_batch_allocation=0.1,
            top_p=0.95,
        )

    # -- data -------------------------------------------------------------------------------------------
    def _local_items(self, path: str, subset: str) -> list[MathItem]:
        return rows_to_items(read_local_rows(path), path, subset)

    def _hub_items(self, name: str, split: str, subset: str) -> list[MathItem]:
        rows = load_rows(None, hub_split(name, split), [], name)
        return rows_to_items(rows, name, subset)

    def load_train(self) -> list[MathItem]:
        """The training problems, shuffled with seed 42."""
        cfg = self.config
        if cfg.dataset_path:
            items = self._local_items(cfg.dataset_path, "train")
        else:
            items = self._hub_items(cfg.dataset_name, cfg.dataset_split, "train")
        random.Random(42).shuffle(items)
        return items

    def load_eval(self) -> list[MathItem]:
        """The evaluation problems of every set, the sets taken in turn."""
        cfg = self.config
        path = cfg.eval_dataset_path or cfg.dataset_path
        if path:
            return self._local_items(path, local_set_name(path))
        if not cfg.eval_sets:
            return []
        sets = [self._hub_items(*HUB_EVAL_SETS[name], name) for name in cfg.eval_sets]
        return interleave(sets)

    async def setup(self) -> None:
        self.train = self.load_train()
        self.test = self.load_eval() if self.config.run_evaluation else []

    # -- prompting and scoring --------------------------------------------------------------------------
    def prompt_messages(self, item: MathItem) -> list[dict[str, str]]:
        return [{"role": "system", "content": system_prompt}, {"role": "user", "content": item.problem}]

    def extract_answers(self, reply: str) -> Optional[list[str]]:
        """The distinct answers a reply gives (None: none), by the boxed convention."""
        return reply_answers(reply)

    async def score_replies_async(self, replies: Sequence[str], item: MathItem) -> list[float]:
        """+1 for each reply whose answers all equal the gold answer, -1 otherwise (checks run
        concurrently in the checker's worker processes)."""
        checks = [self.checker.matches_all(item.gold, self.extract_answers(reply)) for reply in replies]
        return [1.0 if right else -1.0 for right in await asyncio.gather(*checks)]

    # -- judge and self-correction rounds (atroposlib.envs.self_judging) ---------------------------------
    def problem_text(self, item: MathItem) -> str:
        return item.problem

    async def check(self, item: MathItem, reply: str) -> bool:
        return await self.checker.matches_all(item.gold, self.extract_answers(reply))

    async def collect_trajectories(self, item: Any) -> tuple[Optional[ScoredDataGroup], list]:
        if isinstance(item, JudgeTask):
            return await self.judge_round(item)
        if isinstance(item, SelfCorrectGroup):
            return item.group, []
        sampled = await self.sample_group(item)
        if sampled is None:
            return None, []
        messages, replies, nodes = sampled
        scores = [float(s) for s in await self.score_replies_async(replies, item)]
        self.percent_correct_buffer.extend(1.0 if s >= self.correct_threshold else 0.0 for s in scores)
        self.on_group_scored(item, scores)
        backlog = self.judge_tasks(item, replies, scores, nodes)
        if len(set(scores)) <= 1 and scores and scores[0] > 0:
            scores = self.length_penalised(scores, nodes) or scores
        overrides = self.judging_overrides(nodes)
        return self.build_group(
            messages, replies, nodes, scores, overrides if any(overrides) else None
        ), backlog

    # -- evaluation -------------------------------------------------------------------------------------
    def eval_sample_fields(self, item: MathItem) -> dict[str, Any]:
        return {"problem": item.problem, "gold_answer": item.gold, "subset": item.subset}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """``eval/<set>_percent_correct`` per evaluation set and ``eval/overall_percent_correct``."""
        by_set: dict[str, list[bool]] = {}
        for sample in samples:
            by_set.setdefault(sample["subset"], []).append(bool(sample["correct"]))
        metrics = {f"eval/{name}_percent_correct": sum(c) / len(c) for name, c in by_set.items()}
        metrics["eval/overall_percent_correct"] = sum(bool(s["correct"]) for s in samples) / len(samples)
        return metrics

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        if not self.config.run_evaluation:
            return
        await super().evaluate(*args, **kwargs)

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        wandb_metrics = dict(wandb_metrics or {})
        wandb_metrics["train/iter"] = self.iter
        wandb_metrics["train/check_timeouts"] = self.checker.timeouts
        await super().wandb_log(wandb_metrics)


# The original's configuration class name, for code that imports it.
RSConfig = MathEnvConfig


if __name__ == "__main__":
    MathEnv.cli()
