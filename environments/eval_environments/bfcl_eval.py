"""BFCL: the Berkeley Function Calling Leaderboard, on its own data and AST checker.

Data: the question and possible-answer files of the ``bfcl-eval`` package (BFCL v4; installed without its
dependencies by ``scripts/install.sh`` or ``python -m atroposlib.evals.bfcl install``). ``--env.bfcl_categories``
chooses the categories (default: every single-turn one the AST checker scores: simple_python, multiple,
parallel, parallel_multiple, irrelevance, live_simple, live_multiple, live_parallel, live_parallel_multiple,
live_irrelevance, live_relevance; ``simple`` names simple_python; ``--env.bfcl_per_category_limit N`` keeps the first N entries of each).
``--env.dataset_path DIR`` reads a directory
in BFCL's own layout instead (``BFCL_v4_<category>.json`` and ``possible_answer/BFCL_v4_<category>.json``).

Prompt: the functions, converted to JSON-schema tools as BFCL converts them for function-calling models, are
declared in the system prompt inside ``<tools></tools>`` after the instructions (``--env.custom_system_prompt``
replaces BFCL's function-calling instructions; in thinking mode ``custom_thinking_prompt`` comes first); the
model answers with Hermes calls, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, after an
optional think block.

Scoring: BFCL's ``ast_checker`` on the decoded calls (:mod:`atroposlib.evals.bfcl.checker`); irrelevance
entries are right when no call is made, live_relevance ones when one is. A reply whose calls cannot be decoded
is wrong (``ast_decoder:decoder_failed``).

Reports: ``eval/accuracy`` (all entries pooled, with its standard error), accuracy per category
(``eval/category_<name>_accuracy``) and the leaderboard's figures as ``eval/bfcl/<key>``: per category, the
non-live and live AST summaries, irrelevance, and ``overall_single_turn`` (see
:mod:`atroposlib.evals.bfcl.scores`). ``samples.jsonl`` keeps BFCL's ``error_type`` and errors of every wrong
reply.

``python environments/eval_environments/bfcl_eval.py evaluate --openai.base_url http://host:port/v1
--openai.model_name MODEL [--env.bfcl_categories '["simple", "parallel"]']``
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from pydantic import Field

from atroposlib.evals import EvalConfig, EvalEnv, EvalItem, Reply, Row, Score
from atroposlib.evals.bfcl.checker import check_reply, decode_reply
from atroposlib.evals.bfcl.data import BfclItem
from atroposlib.evals.bfcl.env import DEFAULT_CATEGORIES, bfcl_metrics, load_bfcl_items
from atroposlib.evals.bfcl.prompt import prompt_messages


class BfclEvalConfig(EvalConfig):
    """BFCL's settings."""

    thinking_mode: bool = Field(default=False, description="Reasoning mode (see EvalConfig).")
    eval_temperature: float = Field(default=0.0, ge=0.0, description="Sampling temperature (BFCL: greedy).")
    bfcl_categories: list[str] = Field(
        default_factory=lambda: list(DEFAULT_CATEGORIES),
        description="BFCL categories to evaluate (simple_python or simple, multiple, parallel, "
        "parallel_multiple, irrelevance, live_*)",
    )
    bfcl_per_category_limit: Optional[int] = Field(
        default=None, ge=1, description="Evaluate at most this many entries of each category."
    )
    dataset_path: Optional[str] = Field(
        default=None, description="Directory in BFCL's layout, read instead of the installed bfcl-eval data."
    )


class BfclEvalEnv(EvalEnv):
    """BFCL (see the module docstring)."""

    name = "bfcl_eval"
    env_config_cls = BfclEvalConfig
    config: BfclEvalConfig
    breakdowns = ("category",)

    def load_rows(self) -> list[Row]:
        """One row per BFCL entry of the chosen categories (in their order)."""
        cfg = self.config
        entries = load_bfcl_items(cfg.bfcl_categories, cfg.dataset_path, cfg.bfcl_per_category_limit)
        return [Row({"entry": entry}, entry.category, index) for index, entry in enumerate(entries)]

    def make_item(self, row: Row) -> EvalItem:
        entry: BfclItem = row.data["entry"]
        instructions = self.config.custom_system_prompt
        messages = prompt_messages(entry, instructions)
        thinking = self.config.custom_thinking_prompt if self.config.thinking_mode else None
        if thinking:
            messages[0] = {"role": "system", "content": f"{thinking}\n\n{messages[0]['content']}"}
        return EvalItem(
            entry.id, messages, entry, groups={"category": entry.category}, fields={"bfcl_id": entry.id}
        )

    def messages(self, item: EvalItem) -> list[dict[str, Any]]:
        """The entry's own chat: its system prompt declares the tools."""
        return list(item.prompt)

    def score(self, item: EvalItem, reply: Reply) -> Score:
        verdict = check_reply(item.gold, reply.text)
        calls = decode_reply(reply.text)
        fields: dict[str, Any] = {"category": item.gold.category}
        if not verdict.valid:
            fields.update(error_type=verdict.error_type, errors=list(verdict.errors))
        extracted = calls if calls is not None else None
        return Score(float(verdict.valid), extracted=extracted, method="bfcl_checker", fields=fields)

    def sample_record(self, item: EvalItem, messages: Any, index: int, reply: Reply, score: Score) -> dict:
        """The core's record, with the entry's id instead of the entry itself as ``gold``."""
        record = super().sample_record(item, messages, index, reply, score)
        record["gold"] = list(item.gold.ground_truth) if item.gold.ground_truth is not None else None
        return record

    def extra_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """The leaderboard's per-category accuracies and aggregates, ``eval/bfcl/<key>``."""
        scored = [
            {"category": s["category"], "correct": s["score"] == 1.0}
            for s in samples
            if s.get("score") is not None
        ]
        metrics = bfcl_metrics(scored)
        metrics.pop("eval/percent_correct", None)
        return metrics


if __name__ == "__main__":
    BfclEvalEnv.cli()
