"""BFCL as the evaluation set of a single-turn environment.

:class:`BfclEvaluation` is a mixin for a :class:`~atroposlib.envs.single_turn.SingleTurnEnv` whose config
has the :class:`BfclSettings` fields. When ``eval_benchmark`` is ``"bfcl"``, ``evaluate`` answers the
BFCL entries of ``bfcl_categories`` (each once, at ``eval_temperature``) instead of the environment's
own evaluation items, scores each reply with BFCL's checker (:mod:`atroposlib.evals.bfcl.checker`) and
reports ``eval/bfcl/<key>`` for every key of :func:`atroposlib.evals.bfcl.scores.category_scores`, plus
``eval/percent_correct`` (all entries pooled). Each sample in ``samples.jsonl`` carries the entry's
``bfcl_id``, ``category``, and BFCL's ``error_type`` and error lines when the reply was wrong.

The prompt is :func:`atroposlib.evals.bfcl.prompt.prompt_messages` with ``bfcl_system_prompt`` as the
instructions (default: the environment's :meth:`BfclEvaluation.bfcl_instructions`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal, Optional

from pydantic import BaseModel, Field

from atroposlib.envs.data_loading import DatasetError
from atroposlib.evals.bfcl.checker import check_reply
from atroposlib.evals.bfcl.data import CATEGORIES, BfclItem, canonical_category, load_category
from atroposlib.evals.bfcl.prompt import prompt_messages
from atroposlib.evals.bfcl.scores import category_scores

#: The categories evaluated by default: every single-turn category BFCL's AST checker scores.
DEFAULT_CATEGORIES = list(CATEGORIES)


class BfclSettings(BaseModel):
    """Config fields of an environment that can evaluate on BFCL."""

    eval_benchmark: Optional[Literal["bfcl"]] = Field(
        None, description="'bfcl': evaluate on the Berkeley Function Calling Leaderboard instead"
    )
    bfcl_categories: list[str] = Field(
        default_factory=lambda: list(DEFAULT_CATEGORIES),
        description="BFCL categories to evaluate (simple_python or simple, multiple, parallel, "
        "parallel_multiple, irrelevance, live_*)",
    )
    bfcl_data_dir: Optional[str] = Field(
        None, description="directory in BFCL's layout to read instead of the installed bfcl-eval data"
    )
    bfcl_per_category_limit: Optional[int] = Field(
        None, ge=1, description="evaluate at most this many entries of each BFCL category"
    )
    bfcl_system_prompt: Optional[str] = Field(
        None, description="instructions before the declared tools (default: the environment's own)"
    )


def load_bfcl_items(
    categories: Sequence[str], data_dir: Optional[str] = None, per_category: Optional[int] = None
) -> list[BfclItem]:
    """The entries of ``categories`` (in that order) from ``data_dir`` or the installed package, the first
    ``per_category`` of each when set; :class:`DatasetError` for an unknown category, a repeated one, or a bad
    file."""
    names = [canonical_category(name) for name in categories]
    if len(set(names)) != len(names):
        raise DatasetError(f"BFCL: a category is listed twice in {list(categories)}")
    return [item for category in names for item in load_category(category, data_dir)[:per_category]]


def bfcl_metrics(samples: Sequence[dict[str, Any]]) -> dict[str, float]:
    """``eval/bfcl/<key>`` metrics of evaluation samples holding ``category`` and ``correct``."""
    scores = category_scores((s["category"], bool(s["correct"])) for s in samples)
    metrics = {f"eval/bfcl/{key}": value for key, value in scores.items()}
    if samples:
        metrics["eval/percent_correct"] = scores["accuracy"]
    return metrics


class BfclEvaluation:
    """Evaluation on BFCL for a single-turn environment (see the module docstring). List it before the
    environment's base class; the environment's ``setup`` calls :meth:`load_bfcl`."""

    bfcl_items: list[BfclItem]

    def bfcl_enabled(self) -> bool:
        """Whether ``evaluate`` runs BFCL."""
        return self.config.eval_benchmark == "bfcl"  # type: ignore[attr-defined]

    def load_bfcl(self) -> None:
        """Read the BFCL entries when BFCL is the evaluation (call it from ``setup``, so a bad category or
        file stops the run with one line)."""
        cfg = self.config  # type: ignore[attr-defined]
        self.bfcl_items = (
            load_bfcl_items(cfg.bfcl_categories, cfg.bfcl_data_dir) if self.bfcl_enabled() else []
        )

    def bfcl_instructions(self) -> Optional[str]:
        """The instructions shown before the tools: ``bfcl_system_prompt``, else BFCL's prompt default."""
        return self.config.bfcl_system_prompt  # type: ignore[attr-defined]

    async def _bfcl_one(self, item: BfclItem, sem: asyncio.Semaphore) -> dict[str, Any]:
        messages = prompt_messages(item, self.bfcl_instructions())
        async with sem:
            completion = await self.server.chat_completion(  # type: ignore[attr-defined]
                messages=messages,
                n=1,
                max_tokens=self.generation_budget,  # type: ignore[attr-defined]
                temperature=self.config.eval_temperature,  # type: ignore[attr-defined]
                split="eval",
            )
        reply = (completion.choices[0].message.content or "") if completion.choices else ""
        verdict = check_reply(item, reply)
        sample = {
            "messages": [*messages, {"role": "assistant", "content": reply}],
            "bfcl_id": item.id,
            "category": item.category,
            "score": 1.0 if verdict.valid else 0.0,
            "correct": verdict.valid,
        }
        if not verdict.valid:
            sample.update(error_type=verdict.error_type, errors=list(verdict.errors))
        return sample

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        """BFCL when ``eval_benchmark`` is ``"bfcl"``, else the environment's own evaluation."""
        if not self.bfcl_enabled():
            return await super().evaluate(*args, **kwargs)  # type: ignore[misc]
        limit = self.config.eval_limit  # type: ignore[attr-defined]
        items = self.bfcl_items if limit is None else self.bfcl_items[:limit]
        samples, start, end = await self.run_evaluation(self._bfcl_one, items)  # type: ignore[attr-defined]
        metrics = bfcl_metrics(samples)
        shown = " ".join(
            f"{key.removeprefix('eval/bfcl/')}={value:.4f}"
            for key, value in metrics.items()
            if not key.endswith("_count")
        )
        await self.report_evaluation(  # type: ignore[attr-defined]
            metrics,
            samples,
            start,
            end,
            {"temperature": self.config.eval_temperature, "max_tokens": self.generation_budget},  # type: ignore[attr-defined]
            f"BFCL evaluation on {len(samples)} entries: {shown}",
        )
