"""Function calling: answer a request with the right Hermes tool calls, one or several in parallel.

Data: by default ``datasets.load_dataset("NousResearch/XLAM-Atropos", "default", split="train")``, with
``eval_size`` rows (shuffled with seed 42) held out for evaluation; ``--env.eval_split`` evaluates on a
hub split instead (e.g. ``--env.dataset_name NousResearch/tool_calling --env.eval_split test``).
``--env.dataset_path FILE`` (and ``--env.eval_dataset_path``) reads a local file in the Hermes schema:
``conversations``, a list of ``{"from": "system" | "human" | "gpt", "value": ...}`` turns, the tools
declared in ``<tools>...</tools>`` in the system turn and the expected ``<tool_call>{...}</tool_call>``
blocks in the gpt turn. A local training file without an evaluation file is used for both.
``--env.max_eval_samples N`` evaluates on N of the evaluation rows drawn with ``eval_sample_seed``;
``dataset`` is read as ``dataset_name``.

Prompt: our system prompt plus the row's system turn (its tools), then the human turn.

Reward: +1 when the calls after the think block equal the expected calls as a multiset of JSON values
(:mod:`atroposlib.utils.tool_calls`: order of calls and keys ignored, ``250`` = ``250.0``, booleans are
not numbers), -1 otherwise (malformed JSON, a wrong name, a wrong, missing or extra argument, a missing
or extra call, an unclosed tag, calls only inside the think block, an empty reply). When every reply of
a group is right, replies longer than half the generation budget score lower.

Evaluation reports ``eval/simple_accuracy`` (one expected call), ``eval/parallel_accuracy`` (several)
and ``eval/percent_correct`` (all items). ``--env.eval_benchmark bfcl`` evaluates on the Berkeley
Function Calling Leaderboard instead (``--env.bfcl_categories``; :mod:`atroposlib.evals.bfcl.env`), with
this environment's system prompt before the declared tools.

``python environments/tool_calling_server.py {serve,process,evaluate} --openai.base_url ... --openai.model_name ...``
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows
from atroposlib.envs.env_config import EvalSampleSettings
from atroposlib.envs.reporting import summary_line
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.evals.bfcl.env import BfclEvaluation, BfclSettings
from atroposlib.utils.tool_calls import ToolCall, ToolCallError, expected_tool_calls, reply_matches

logger = logging.getLogger(__name__)

DEFAULT_DATASET = "NousResearch/XLAM-Atropos"

system_prompt = (
    "You are a deep thinking AI. You may reason at length before answering: put your thoughts inside "
    "<think> </think> tags.\n\n"
    "After thinking, answer the request by calling the functions declared below. Write each call on its "
    'own as <tool_call>{"name": "function_name", "arguments": {"argument": value}}</tool_call> with '
    "valid JSON inside the tags. When the request needs several calls, write one block per call. Use only "
    "declared functions and give exactly the arguments the request calls for."
)


@dataclass(frozen=True)
class ToolCallingItem:
    """One prompt: the chat ``messages`` to send and the ``expected`` calls (their source text too)."""

    messages: tuple[dict[str, str], ...]
    expected: tuple[ToolCall, ...]
    expected_text: str

    @property
    def parallel(self) -> bool:
        """Whether the expected answer holds more than one call."""
        return len(self.expected) > 1


class ToolCallingEnvConfig(BfclSettings, EvalSampleSettings, SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus where the conversations come from (and BFCL as the evaluation);
    ``max_eval_samples`` evaluates on a seeded random subset of the evaluation rows."""

    #: compat: 0.4.0's name of the hub set.
    original_key_aliases = {"dataset": "dataset_name"}

    dataset_name: str = Field(DEFAULT_DATASET, description="hub data set of Hermes function-calling rows")
    dataset_config: Optional[str] = Field("default", description="configuration of the hub data set")
    dataset_split: str = Field("train", description="hub split to train on")
    eval_split: Optional[str] = Field(
        None, description="hub split to evaluate on; unset: hold out eval_size rows of the training split"
    )
    eval_size: int = Field(
        100, ge=1, description="rows held out of the hub training split for evaluation (when no eval_split)"
    )
    dataset_path: Optional[str] = Field(
        None, description="local file (JSONL, JSON, Parquet or CSV) of Hermes rows used instead of the hub"
    )
    eval_dataset_path: Optional[str] = Field(
        None, description="local file for evaluation (default: dataset_path when that is set)"
    )


def _turn(conversations: list[dict[str, Any]], role: str) -> Optional[str]:
    return next((turn["value"] for turn in conversations if turn["from"] == role), None)


def row_to_item(row: dict[str, Any], index: int, source: str) -> ToolCallingItem:
    """The prompt and expected calls of one Hermes row.

    Raises :class:`DatasetError` (one line naming ``source`` and the row) when a turn lacks ``from`` or
    ``value`` or there is no human or gpt turn, and :class:`ToolCallError` when the gpt turn holds no
    well-formed call.
    """
    conversations = row["conversations"]
    if not isinstance(conversations, list):
        raise DatasetError(f"{source}: row {index}: field 'conversations' is not a list of turns")
    for position, turn in enumerate(conversations):
        for key in ("from", "value"):
            if not isinstance(turn, dict) or not isinstance(turn.get(key), str):
                raise DatasetError(f"{source}: row {index}: conversations[{position}] lacks {key!r}")
    human, answer = _turn(conversations, "human"), _turn(conversations, "gpt")
    for role, value in (("human", human), ("gpt", answer)):
        if value is None:
            raise DatasetError(f"{source}: row {index}: no {role!r} turn in 'conversations'")
    tools = _turn(conversations, "system")
    system = system_prompt if tools is None else f"{system_prompt}\n\n{tools}"
    messages = ({"role": "system", "content": system}, {"role": "user", "content": human})
    return ToolCallingItem(
        messages=messages, expected=tuple(expected_tool_calls(answer)), expected_text=answer
    )


def rows_to_items(rows: list[dict[str, Any]], source: str) -> list[ToolCallingItem]:
    """Items of all rows. Rows whose expected answer holds no well-formed call are left out with one
    warning that counts them; :class:`DatasetError` when none is left."""
    items, unusable = [], []
    for index, row in enumerate(rows):
        try:
            items.append(row_to_item(row, index, source))
        except ToolCallError as exc:
            unusable.append(f"row {index} ({exc})")
    if unusable:
        logger.warning(
            "%s: %d of %d rows have no usable expected tool call and are left out, first: %s",
            source,
            len(unusable),
            len(rows),
            unusable[0],
        )
    if not items:
        raise DatasetError(f"{source}: no row has a usable expected tool call (first: {unusable[0]})")
    return items


class ToolCallingEnv(BfclEvaluation, LocalServerDefaults, SingleTurnEnv):
    """Rewards replies whose Hermes tool calls equal the expected ones; evaluates simple and parallel."""

    name = "tool_calling"
    env_config_cls = ToolCallingEnvConfig
    config: ToolCallingEnvConfig
    default_server_port = 9004
    # Right replies score in [0, 1] (1 unless shortened by the length preference), wrong ones -1.
    correct_threshold = 0.0

    @classmethod
    def default_env_config(cls) -> ToolCallingEnvConfig:
        return ToolCallingEnvConfig(
            group_size=16,
            total_steps=2000,
            batch_size=1024,
            steps_per_eval=25,
            max_token_length=1024 * 16,
            wandb_name="toolcall_think",
            temperature=0.8,
        )

    def _hub(self, split: str):
        cfg = self.config
        return hub_split(cfg.dataset_name, split, cfg.dataset_config)

    def _load(self) -> tuple[list[ToolCallingItem], list[ToolCallingItem]]:
        cfg = self.config
        required = ["conversations"]
        rows = load_rows(cfg.dataset_path, self._hub(cfg.dataset_split), required, cfg.dataset_name)
        train = rows_to_items(rows, cfg.dataset_path or cfg.dataset_name)
        random.Random(42).shuffle(train)
        if cfg.eval_dataset_path or cfg.dataset_path or cfg.eval_split:
            eval_path = cfg.eval_dataset_path or cfg.dataset_path
            hub_name = f"{cfg.dataset_name} ({cfg.eval_split})"
            eval_rows = load_rows(eval_path, self._hub(cfg.eval_split or "test"), required, hub_name)
            test = rows_to_items(eval_rows, eval_path or hub_name)
        else:
            if len(train) <= cfg.eval_size:
                raise DatasetError(
                    f"{cfg.dataset_name}: {len(train)} usable rows, too few to hold out eval_size={cfg.eval_size}"
                )
            train, test = train[cfg.eval_size :], train[: cfg.eval_size]
        return train, cfg.sample_eval(test)

    async def setup(self) -> None:
        self.train, self.test = self._load()
        self.load_bfcl()

    def bfcl_instructions(self) -> str:
        """BFCL's tools follow the system prompt this environment trains with."""
        return self.config.bfcl_system_prompt or system_prompt

    def prompt_messages(self, item: ToolCallingItem) -> list[dict[str, str]]:
        return [dict(message) for message in item.messages]

    def score_replies(self, replies: Sequence[str], item: ToolCallingItem) -> list[float]:
        """+1 for a reply making exactly the expected calls, -1 otherwise; when every reply is right,
        replies longer than half the generation budget lose up to 1 linearly."""
        scores = [1.0 if reply_matches(reply, item.expected) else -1.0 for reply in replies]
        if len(scores) > 1 and all(score == 1.0 for score in scores):
            budget = self.generation_budget
            threshold = budget * 0.5
            lengths = [len(self.tokenizer.encode(reply, add_special_tokens=False)) for reply in replies]
            scores = [
                1.0 if length <= threshold else 1.0 - min((length - threshold) / (budget - threshold), 1.0)
                for length in lengths
            ]
        return scores

    def eval_sample_fields(self, item: ToolCallingItem) -> dict[str, Any]:
        return {"expected_tool_calls": item.expected_text, "parallel": item.parallel}

    def evaluation_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """Overall, simple and parallel accuracy (see :func:`evaluation_metrics`)."""
        return evaluation_metrics(list(samples))

    def evaluation_summary(self, metrics: dict[str, float], samples: Sequence[dict[str, Any]]) -> str:
        return summary_line(self.name, len(samples), "items", metrics)


def evaluation_metrics(results: list[dict[str, Any]]) -> dict[str, float]:
    """Accuracy over all results and separately over simple (one call) and parallel (several) items.

    A kind with no items is left out rather than reported as 0.
    """
    metrics: dict[str, float] = {}
    if results:
        metrics["eval/percent_correct"] = sum(r["correct"] for r in results) / len(results)
    for kind, parallel in (("simple", False), ("parallel", True)):
        chosen = [r["correct"] for r in results if r["parallel"] is parallel]
        if chosen:
            metrics[f"eval/{kind}_accuracy"] = sum(chosen) / len(chosen)
    return metrics


# The original's class names, for code that imports them.
SingleToolCallingEnv = ToolCallingEnv
ToolCallingConfig = ToolCallingEnvConfig


if __name__ == "__main__":
    ToolCallingEnv.cli()
