"""SWE-RL: fix a repository issue with SEARCH/REPLACE edits, rewarded by similarity to the gold patch.

After SWE-RL (Wei et al., "SWE-RL: Advancing LLM Reasoning via Reinforcement Learning on Open Software
Evolution", arXiv:2502.18449). Each item is an issue and the code of the files it touches; the model reasons
(optionally in ``<think>...</think>``) and answers with one or more edits::

    ### path/to/file.py
    <<<<<<< SEARCH
    lines as they are
    =======
    lines as they should be
    >>>>>>> REPLACE

Reward, as in the paper: -1 for a malformed answer (no edit block, a block cut short, an edit of a file the
context does not show or whose SEARCH text is not in it, a malformed think block); otherwise the edits are
applied to the context's files and the unified diff they make is compared with the gold patch by
``difflib.SequenceMatcher(...).ratio()`` (1.0 = the gold change). See ``swe_rl/patches.py``.

Data: ``NousResearch/SWE-smith-oracle`` (train) for training and ``princeton-nlp/SWE-bench_Lite_oracle`` (test)
for evaluation, as the original. ``--env.dataset_path`` / ``--env.eval_dataset_path`` read local files in their
schema: ``problem_statement``, ``text`` (the oracle context: files between ``[start of PATH]`` and
``[end of PATH]``, numbered lines) and ``patch`` (the gold diff); the column names are
``--env.dataset_issue_column``, ``dataset_code_context_column`` and ``dataset_oracle_patch_column``.

Curriculum (``use_curriculum_learning``, on by default): prompts carry a worked example until the share of
well-formed answers since the last log reaches ``icl_prompt_threshold``.

``python environments/swe_rl_env.py {serve,process,evaluate} --openai.base_url ... --openai.model_name ...``
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.base import APIServerConfig, EvalHandlingEnum
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import hub_split, load_rows
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig

try:
    from environments.swe_rl.patches import MALFORMED, patch_reward
except ModuleNotFoundError:  # run as a script: environments/ is on the path
    from swe_rl.patches import MALFORMED, patch_reward

logger = logging.getLogger(__name__)

TRAIN_DATASET = "NousResearch/SWE-smith-oracle"
EVAL_DATASET = "princeton-nlp/SWE-bench_Lite_oracle"
DEFAULT_MODEL = "NousResearch/DeepHermes-3-Llama-3-8B-Preview"

SYSTEM_PROMPT = (
    "You are a deep thinking AI: you may reason at length inside <think> </think> tags before answering.\n\n"
    "You fix software issues. You are given an issue and the code of the relevant files. Answer only with "
    "SEARCH/REPLACE edits in the format the user describes, whatever patch format the issue itself asks for."
)
USER_TEMPLATE = """Here is the issue to solve in our repository:
--- BEGIN ISSUE ---
{problem_statement}
--- END ISSUE ---
Below is the code of the relevant files; one or more of them may contain the bug.
--- BEGIN FILE ---
``` {content} ```
--- END FILE ---
First localize the bug from the issue, then write SEARCH/REPLACE edits that fix it. Each edit is:
1. the file path after "### "
2. the line <<<<<<< SEARCH
3. a contiguous chunk of the file's current lines, exactly as they are (indentation included)
4. the line =======
5. the lines that replace them
6. the line >>>>>>> REPLACE
For example:
```python
### mathweb/flask/app.py
<<<<<<< SEARCH
from flask import Flask
=======
import math
from flask import Flask
>>>>>>> REPLACE
```
Put each edit in its own code block."""

EXAMPLE_ISSUE = (
    "`area` multiplies the length by 3 instead of the width, and should return 0 when a side is not positive."
)
EXAMPLE_CONTEXT = """[start of geometry/shapes.py]
1 def area(length, width):
2     if length <= 0 or width <= 0:
3         pass
4     return length * 3
[end of geometry/shapes.py]"""
EXAMPLE_ANSWER = """```python
### geometry/shapes.py
<<<<<<< SEARCH
    if length <= 0 or width <= 0:
        pass
    return length * 3
=======
    if length <= 0 or width <= 0:
        return 0
    return length * width
>>>>>>> REPLACE
```"""


@dataclass(frozen=True)
class Task:
    """One issue: its statement, its code context and the gold patch."""

    item_id: str
    problem_statement: str
    code_context: str
    oracle_patch: str
    #: evaluation prompts never carry the curriculum's worked example
    evaluation: bool = False


class SWERLEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the original's data, curriculum and dump settings."""

    dataset_name: str = Field(TRAIN_DATASET, description="hub set for training")
    dataset_config_name: Optional[str] = Field(None, description="configuration of dataset_name")
    dataset_split_train: str = Field("train", description="split of dataset_name used for training")
    dataset_split_eval: str = Field("test", description="split of the evaluation set")
    dataset_name_eval: Optional[str] = Field(
        EVAL_DATASET, description="hub set for evaluation (None: 500 rows of the training set held out)"
    )
    dataset_config_name_eval: Optional[str] = Field(None, description="configuration of dataset_name_eval")
    dataset_path: Optional[str] = Field(None, description="local training rows (instead of dataset_name)")
    eval_dataset_path: Optional[str] = Field(None, description="local evaluation rows")
    dataset_issue_column: str = Field("problem_statement", description="column of the issue text")
    dataset_code_context_column: str = Field("text", description="column of the code context")
    dataset_oracle_patch_column: str = Field("patch", description="column of the gold patch")
    max_train_samples: Optional[int] = Field(100000, ge=1, description="keep at most this many training rows")
    max_test_samples: Optional[int] = Field(500, ge=1, description="keep at most this many evaluation rows")
    eval_n_samples: int = Field(1, ge=1, description="replies per evaluation item (their scores averaged)")
    use_curriculum_learning: bool = Field(True, description="start with a worked example in every prompt")
    icl_prompt_threshold: float = Field(
        0.2, ge=0.0, le=1.0, description="well-formed share of answers that drops the worked example"
    )
    dump_rollouts: bool = Field(False, description="append every scored group to swe_rl/data_dumps/")
    dump_failed_rollouts: bool = Field(
        False, description="append groups in which no answer is well formed to swe_rl/data_dumps/"
    )
    dump_dir: str = Field("swe_rl/data_dumps", description="directory of the rollout dumps")


def tasks_from_rows(
    rows: Sequence[dict[str, Any]], config: SWERLEnvConfig, prefix: str, evaluation: bool = False
) -> list[Task]:
    """Tasks of rows already checked for the configured columns."""
    return [
        Task(
            str(row.get("instance_id") or f"{prefix}_{index}"),
            str(row[config.dataset_issue_column]),
            str(row[config.dataset_code_context_column]),
            str(row[config.dataset_oracle_patch_column]),
            evaluation,
        )
        for index, row in enumerate(rows)
    ]


class SWERLEnv(LocalServerDefaults, SingleTurnEnv):
    """Issues fixed with SEARCH/REPLACE edits, scored by similarity to the gold patch (module docstring)."""

    name = "swe_rl"
    env_config_cls = SWERLEnvConfig
    config: SWERLEnvConfig
    default_model = DEFAULT_MODEL
    default_server_port = 9004
    #: an evaluation reply "passes" only when its patch is the gold one
    correct_threshold = 1.0

    def __init__(self, config: SWERLEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.using_icl_prompt = config.use_curriculum_learning
        self.format_buffer: list[float] = []
        self.similarity_buffer: list[float] = []
        self.run_id = uuid.uuid4().hex[:8]

    @classmethod
    def default_env_config(cls) -> SWERLEnvConfig:
        return SWERLEnvConfig(
            group_size=16,
            batch_size=512,
            total_steps=10000,
            steps_per_eval=100,
            max_token_length=1024 * 15,
            temperature=0.8,
            eval_temperature=0.2,
            eval_handling=EvalHandlingEnum.LIMIT_TRAIN,
            eval_limit_ratio=0.1,
        )

    @classmethod
    def default_server_config(cls) -> APIServerConfig:
        server = super().default_server_config()
        server.num_max_requests_at_once, server.num_requests_for_eval = 32, 64
        return server

    # -- data -------------------------------------------------------------------------------------------
    def _columns(self) -> list[str]:
        cfg = self.config
        return [cfg.dataset_issue_column, cfg.dataset_code_context_column, cfg.dataset_oracle_patch_column]

    async def setup(self) -> None:
        cfg = self.config
        train = load_rows(
            cfg.dataset_path,
            hub_split(cfg.dataset_name, cfg.dataset_split_train, cfg.dataset_config_name),
            self._columns(),
            f"{cfg.dataset_name} ({cfg.dataset_split_train})",
            limit=cfg.max_train_samples,
        )
        if cfg.eval_dataset_path or (cfg.dataset_name_eval and not cfg.dataset_path):
            test = load_rows(
                cfg.eval_dataset_path,
                hub_split(cfg.dataset_name_eval or cfg.dataset_name, cfg.dataset_split_eval,
                          cfg.dataset_config_name_eval),
                self._columns(),
                f"{cfg.dataset_name_eval} ({cfg.dataset_split_eval})",
            )  # fmt: skip
        else:
            # No evaluation set of its own: hold out up to 500 training rows (at most half of them).
            held_out = min(500, len(train) // 2) or len(train)
            test, train = train[:held_out], train[held_out:] or train
        self.train = tasks_from_rows(train, cfg, "train")
        self.test = tasks_from_rows(test, cfg, "test", evaluation=True)
        if cfg.max_test_samples is not None:
            self.test = self.test[: cfg.max_test_samples]

    # -- task -------------------------------------------------------------------------------------------
    def prompt_messages(self, item: Task) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": SYSTEM_PROMPT}]
        if self.using_icl_prompt and not item.evaluation:
            example = USER_TEMPLATE.format(problem_statement=EXAMPLE_ISSUE, content=EXAMPLE_CONTEXT)
            messages += [
                {"role": "user", "content": example},
                {"role": "assistant", "content": EXAMPLE_ANSWER},
            ]
        user = USER_TEMPLATE.format(problem_statement=item.problem_statement, content=item.code_context)
        return [*messages, {"role": "user", "content": user}]

    def score_reply(self, reply: str, item: Task) -> float:
        return patch_reward(reply, item.code_context, item.oracle_patch)

    def on_group_scored(self, item: Task, scores: Sequence[float]) -> None:
        well_formed = [s for s in scores if s != MALFORMED]
        self.format_buffer.append(len(well_formed) / len(scores))
        self.similarity_buffer.extend(well_formed)
        if self.using_icl_prompt and mean(self.format_buffer) >= self.config.icl_prompt_threshold:
            self.using_icl_prompt = False
            logger.info(
                "swe_rl: well-formed share reached %.2f; worked example dropped", self.format_buffer[-1]
            )
        if self.config.dump_rollouts or (self.config.dump_failed_rollouts and not well_formed):
            self._dump(item, scores)

    def _dump(self, item: Task, scores: Sequence[float]) -> None:
        directory = Path(self.config.dump_dir)
        directory.mkdir(parents=True, exist_ok=True)
        record = {"item_id": item.item_id, "scores": list(scores), "oracle_patch": item.oracle_patch}
        with open(directory / f"swe_rl_rollouts_{self.run_id}.jsonl", "a") as out:
            out.write(json.dumps(record) + "\n")

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        metrics = dict(wandb_metrics or {})
        if self.format_buffer:
            metrics["train/avg_patch_format_accuracy"] = mean(self.format_buffer)
        if self.similarity_buffer:
            metrics["train/avg_similarity_score_for_correct_patches"] = mean(self.similarity_buffer)
        if self.config.use_curriculum_learning:
            metrics["env/using_icl_prompt"] = 1.0 if self.using_icl_prompt else 0.0
        self.format_buffer, self.similarity_buffer = [], []
        await super().wandb_log(metrics)

    # -- evaluation -------------------------------------------------------------------------------------
    async def _eval_one(self, item: Task, sem) -> dict[str, Any]:
        async with sem:
            messages, replies = await self._sample(
                self.server, item, self.config.eval_n_samples, max_tokens=self.generation_budget,
                temperature=self.config.eval_temperature, split="eval",
            )  # fmt: skip
        replies = replies or [""]
        scores = [self.score_reply(reply, item) for reply in replies]
        score = mean(scores)
        return {
            "messages": [*messages, {"role": "assistant", "content": replies[0]}],
            "item_id": item.item_id,
            "oracle_patch": item.oracle_patch,
            "scores": scores,
            "score": score,
            "correct": score >= self.correct_threshold,
        }

    def eval_items(self) -> list[Task]:
        return self.test

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        scores = [s for sample in samples for s in sample["scores"]]
        well_formed = [s for s in scores if s != MALFORMED]
        return {
            "eval/patch_format_accuracy": len(well_formed) / len(scores),
            "eval/avg_similarity_score_correct_patch_format": mean(well_formed) if well_formed else 0.0,
            "eval/pass_at_1": sum(1 for s in scores if s == 1.0) / len(scores),
        }


if __name__ == "__main__":
    SWERLEnv.cli()
