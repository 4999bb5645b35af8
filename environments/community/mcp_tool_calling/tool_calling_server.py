"""MCP tool calling: answer a request with the right Hermes tool calls to the declared tools (the
community collection's ``mcp_tool_calling``, trained as its original was, on the function-calling rows of
``NousResearch/XLAM-Atropos``).

The task, prompt and reward are those of ``environments/tool_calling_server.py`` (this environment is a
configuration of :class:`~environments.tool_calling_server.ToolCallingEnv`):

* Data: ``datasets.load_dataset("NousResearch/XLAM-Atropos", "default", split="train")``, shuffled with
  seed 42, ``eval_share`` (2 %) held out for evaluation, as the original split it. ``--env.eval_size N``
  holds out N rows instead, ``--env.eval_split`` evaluates on a hub split. ``--env.dataset_path FILE``
  (and ``--env.eval_dataset_path``) reads a local file in the hub set's schema: ``conversations``, a list
  of ``{"from": "system" | "human" | "gpt", "value": ...}`` turns, the tools declared in
  ``<tools>...</tools>`` in the system turn and the expected ``<tool_call>{...}</tool_call>`` blocks in the
  gpt turn; a bad row stops the environment with one line naming the file, the row and the field.
* Reward: +1 when the calls after the ``<think>`` block equal the expected calls as a multiset of JSON
  values (order of calls and keys free, ``2`` = ``2.0``), -1 for anything else: a wrong name, a wrong,
  missing or extra argument, a missing or extra call (several alternatives hedge), malformed JSON or
  tags, calls only inside the think block. When a whole group is right, replies longer than half the
  generation budget score lower. Evaluation reports ``eval/percent_correct``, ``eval/simple_accuracy``
  and ``eval/parallel_accuracy``.
* Defaults of the original: 32 replies per group at temperature 0.8, 15 360 new tokens (16 384 in all),
  evaluation replies at temperature 1.0, ``steps_per_eval`` 20, ``LIMIT_TRAIN`` evaluation at ratio 0.1,
  ``Qwen/Qwen2.5-1.5B-Instruct`` served on ``localhost:9004``.

``python environments/community/mcp_tool_calling/tool_calling_server.py {serve,process,evaluate}``
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path
from typing import Optional

from pydantic import Field

# Run as a script from anywhere: the repository root makes ``environments`` importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from atroposlib.envs.base import EvalHandlingEnum  # noqa: E402
from atroposlib.envs.data_loading import DatasetError, load_rows  # noqa: E402
from atroposlib.envs.declared_defaults import DeclaredDefaults  # noqa: E402
from environments import tool_calling_server as function_calling  # noqa: E402


class SingleToolCallingEnvConfig(function_calling.ToolCallingEnvConfig):
    """The function-calling settings, with the hub set split by share as the original split it."""

    eval_size: Optional[int] = Field(
        None, ge=1, description="rows of the hub training split held out for evaluation; unset: eval_share"
    )
    eval_share: float = Field(
        0.02, gt=0.0, lt=1.0, description="share of the hub training split held out for evaluation"
    )


class SingleToolCallingEnv(DeclaredDefaults, function_calling.ToolCallingEnv):
    """Rewards replies whose Hermes tool calls equal the expected ones, with the original's defaults."""

    name = "mcp_tool_calling"
    env_config_cls = SingleToolCallingEnvConfig
    config: SingleToolCallingEnvConfig
    default_model = "Qwen/Qwen2.5-1.5B-Instruct"
    default_server_port = 9004
    default_server_settings = {"num_max_requests_at_once": 32}
    default_env_values = {
        "group_size": 32,
        "total_steps": 2000,
        "batch_size": 1024,
        "steps_per_eval": 20,
        "max_token_length": 1024 * 16,
        "max_tokens": 1024 * 15,
        "temperature": 0.8,
        "eval_temperature": 1.0,
        "wandb_name": "toolcall_think",
        "eval_handling": EvalHandlingEnum.LIMIT_TRAIN,
        "eval_limit_ratio": 0.1,
    }

    def _load(self) -> tuple[list[function_calling.ToolCallingItem], list[function_calling.ToolCallingItem]]:
        """Local files, a hub evaluation split or a fixed ``eval_size`` as the function-calling environment
        reads them; otherwise the shuffled hub training split with ``eval_share`` of it held out."""
        cfg = self.config
        if cfg.dataset_path or cfg.eval_dataset_path or cfg.eval_split or cfg.eval_size is not None:
            return super()._load()
        rows = load_rows(None, self._hub(cfg.dataset_split), ["conversations"], cfg.dataset_name)
        items = function_calling.rows_to_items(rows, cfg.dataset_name)
        random.Random(42).shuffle(items)
        held_out = math.ceil(len(items) * cfg.eval_share)
        if held_out >= len(items):
            raise DatasetError(
                f"{cfg.dataset_name}: {len(items)} usable rows, too few to hold out eval_share={cfg.eval_share}"
            )
        return items[held_out:], cfg.sample_eval(items[:held_out])


if __name__ == "__main__":
    SingleToolCallingEnv.cli()
