"""BFCL: the Berkeley Function Calling Leaderboard, on its own data and AST checker.

Data: the question and possible-answer files of the ``bfcl-eval`` package (BFCL v4; installed without
its dependencies by ``scripts/install.sh`` or ``python -m atroposlib.evals.bfcl install``).
``--env.bfcl_categories`` chooses the categories (default: all single-turn ones the AST checker scores:
simple_python, multiple, parallel, parallel_multiple, irrelevance, live_simple, live_multiple,
live_parallel, live_parallel_multiple, live_irrelevance, live_relevance; ``simple`` names
simple_python). ``--env.dataset_path DIR`` reads a directory in BFCL's own layout instead
(``BFCL_v4_<category>.json`` and ``possible_answer/BFCL_v4_<category>.json``).

Prompt: the functions, converted to JSON-schema tools as BFCL converts them for function-calling models,
are declared in the system prompt inside ``<tools></tools>``; the model answers with Hermes calls,
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, after an optional think block.
``--env.custom_system_prompt`` replaces the instructions before the tools.

Scoring: BFCL's ``ast_checker`` on the decoded calls (:mod:`atroposlib.evals.bfcl.checker`);
irrelevance entries are right when no call is made, live_relevance ones when one is. ``metrics.json``
holds ``eval/bfcl/<category>`` accuracies and the leaderboard's aggregates (``non_live_summary_ast``,
``live_summary_ast``, ``irrelevance_total``, ``overall_single_turn``; see
:mod:`atroposlib.evals.bfcl.scores`); ``samples.jsonl`` each reply with BFCL's ``error_type`` when wrong.

``python environments/eval_environments/bfcl_eval.py evaluate --openai.base_url http://host:port/v1
--openai.model_name MODEL [--env.bfcl_categories '["simple", "parallel"]']``
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.evals.bfcl.env import BfclEvaluation, BfclSettings


class BfclEvalConfig(BfclSettings, SingleTurnEnvConfig):
    """The BFCL settings, with BFCL as the evaluation."""

    eval_benchmark: Optional[str] = Field("bfcl", description="always 'bfcl' here")
    dataset_path: Optional[str] = Field(
        None, description="directory in BFCL's layout to read instead of the installed bfcl-eval data"
    )
    custom_system_prompt: Optional[str] = Field(
        None, description="instructions before the declared tools (default: BFCL's function-calling prompt)"
    )
    eval_max_tokens: Optional[int] = Field(
        None, ge=1, description="token budget of a reply (default: max_tokens, else max_token_length)"
    )


class BfclEvalEnv(BfclEvaluation, LocalServerDefaults, SingleTurnEnv):
    """Evaluation-only environment: ``evaluate`` runs BFCL (see the module docstring)."""

    name = "bfcl_eval"
    env_config_cls = BfclEvalConfig
    config: BfclEvalConfig
    default_server_port = 9000

    @classmethod
    def default_env_config(cls) -> BfclEvalConfig:
        return BfclEvalConfig(group_size=1, max_token_length=4096, eval_temperature=0.0, max_eval_workers=256)

    @property
    def generation_budget(self) -> int:
        return self.config.eval_max_tokens or super().generation_budget

    def bfcl_instructions(self) -> Optional[str]:
        return self.config.custom_system_prompt or self.config.bfcl_system_prompt

    async def setup(self) -> None:
        if self.config.eval_benchmark != "bfcl":
            raise DatasetError(f"bfcl_eval: eval_benchmark must be 'bfcl', not {self.config.eval_benchmark!r}")
        if self.config.dataset_path:
            self.config.bfcl_data_dir = self.config.dataset_path
        self.load_bfcl()

    async def get_next_item(self) -> Any:
        raise DatasetError("bfcl_eval is an evaluation: run it with `evaluate`")

    def prompt_messages(self, item: Any) -> list[dict[str, str]]:
        raise DatasetError("bfcl_eval is an evaluation: run it with `evaluate`")


if __name__ == "__main__":
    BfclEvalEnv.cli()
