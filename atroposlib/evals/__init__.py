"""The eval core: benchmarks as declarations, one loop that asks, scores, resumes and reports.

A benchmark in ``environments/eval_environments/`` is an :class:`EvalEnv` subclass (multiple choice:
:class:`MultipleChoiceEval`) that declares its data, its items and its scorer; the core loads the rows (hub by
default, ``--env.dataset_path`` file or per-subset directory instead), builds the system prompt from
``thinking_mode`` / ``custom_thinking_prompt`` / ``custom_system_prompt``, samples ``pass_at_n_samples`` replies
per item at ``eval_temperature`` / ``eval_max_tokens``, retries, shows progress, reuses already scored items
with ``--env.resume true``, and writes ``metrics.json`` (accuracy with standard error, breakdowns, pass@k /
mean@k / maj@k) and ``samples.jsonl``. A multiple-choice benchmark is this much::

    from pydantic import Field
    from atroposlib.evals import EvalConfig, HubSet, MCQuestion, MultipleChoiceEval

    class ArcEvalConfig(EvalConfig):
        dataset_name: str = Field("allenai/ai2_arc", description="hub data set")
        subsets: list[str] = Field(["ARC-Easy", "ARC-Challenge"], description="its configurations")

    class ArcEvalEnv(MultipleChoiceEval):
        name = "arc_eval"
        env_config_cls = ArcEvalConfig
        breakdowns = ("subset",)                      # accuracy per subset, beside the overall one

        def hub_set(self) -> HubSet:                  # default: dataset_name / subset / eval_split
            return HubSet(self.config.dataset_name, self.config.eval_split, tuple(self.config.subsets))

        def question(self, row) -> MCQuestion:        # row.data: the hub row; row.subset: its config
            d = row.data
            return MCQuestion(d["question"], d["choices"]["text"],
                              d["choices"]["label"].index(d["answerKey"]), groups={"subset": row.subset})

    if __name__ == "__main__":
        ArcEvalEnv.cli()

Other benchmarks subclass :class:`EvalEnv` directly: ``make_item(row) -> EvalItem`` (id, prompt text or
messages, gold, breakdown ``groups``, sample ``fields``) and ``score(item, reply) -> Score`` (``value`` 0..1,
or None for "could not be scored", counted apart; ``extracted``; extra per-reply ``metrics`` such as F1;
``score`` may be ``async``). Optional hooks: ``generate`` (several turns), ``extra_metrics`` (metrics over all
samples, e.g. instruction-level IFEval accuracy), ``metric`` (the name of the main mean, default
``accuracy``). Raise :class:`RowError` (field, why) for a bad row: it is reported with the file and row.
"""

from __future__ import annotations

import importlib
from typing import Any

# Exports are imported on first use, so ``import atroposlib.evals.freeform`` (or a worker process importing a
# scorer) does not pull in the environment and server layers.
_EXPORTS = {
    "LETTERS": "answers",
    "extract_letter": "answers",
    "HubSet": "data",
    "Row": "data",
    "RowError": "data",
    "load_eval_rows": "data",
    "known_subsets": "data",
    "EvalConfig": "env",
    "EvalEnv": "env",
    "Progress": "env",
    "EvalItem": "items",
    "Messages": "items",
    "Reply": "items",
    "Score": "items",
    "LIGHTEVAL_MC_TEMPLATE": "multiple_choice",
    "MCQuestion": "multiple_choice",
    "MultipleChoiceEval": "multiple_choice",
    "answer_index": "multiple_choice",
    "format_choices": "multiple_choice",
    "option_labels": "multiple_choice",
    "labelled_choices": "multiple_choice",
    "extract_number": "answers",
    "extract_word": "answers",
    "seeded_order": "multiple_choice",
    "aggregate": "report",
    "mean_and_stderr": "report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'atroposlib.evals' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"atroposlib.evals.{module}"), name)
    globals()[name] = value
    return value
