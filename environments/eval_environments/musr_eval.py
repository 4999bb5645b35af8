"""MuSR: multi-step reasoning over long narratives (murder mysteries, object placements, team allocation).

Data: ``TAUR-Lab/MuSR``, whose splits are the three tasks: ``--env.subset`` names one (default
``murder_mysteries``) or ``all``. ``--env.dataset_path`` reads a local file in the hub schema (``narrative``,
``question``, ``choices``: a list, or its Python text as on the hub, ``answer_index``) or a directory of
per-task files (``murder_mysteries.jsonl`` ...).

Prompt: the narrative, the question and the options numbered ``1 - ...``; the number inside
``<answer></answer>``. Scoring: the number the eval core reads (``<answer>2</answer>``, ``\\boxed{2}``,
``Answer: 2`` or a trailing number; two numbers or an unclosed think block are wrong). Reports accuracy with
its standard error, and by task.

``python environments/eval_environments/musr_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/musr``
"""

from __future__ import annotations

import ast
from typing import Any, Optional

from pydantic import Field

from atroposlib.evals import (
    EvalConfig,
    HubSet,
    MCQuestion,
    MultipleChoiceEval,
    Row,
    RowError,
    answer_index,
    known_subsets,
)

MUSR_SUBSETS = ("murder_mysteries", "object_placements", "team_allocation")

MUSR_PROMPT_TEMPLATE = """Read the narrative and answer the question. Think step by step before answering.

Provide your final answer within <answer></answer> tags, containing only the number ({valid_letters}).

Example format:
<answer>1</answer>

{question}

{choices}"""


class MuSREvalConfig(EvalConfig):
    """MuSR's settings."""

    dataset_name: str = Field(default="TAUR-Lab/MuSR", description="Hugging Face data set of MuSR.")
    subset: str = Field(
        default="murder_mysteries", description="murder_mysteries, object_placements, team_allocation or all."
    )


def _hub_split(hub: HubSet, task: Optional[str]) -> Any:
    from datasets import load_dataset

    return load_dataset(hub.name, split=task)


class MuSREvalEnv(MultipleChoiceEval):
    """MuSR (see the module docstring)."""

    name = "musr_eval"
    env_config_cls = MuSREvalConfig
    config: MuSREvalConfig
    required_fields = ("narrative", "question", "choices", "answer_index")
    breakdowns = ("task",)
    prompt_template = MUSR_PROMPT_TEMPLATE
    choice_template = "{label} - {choice}"
    numbered = True

    def hub_set(self) -> HubSet:
        subset = self.config.subset
        tasks = MUSR_SUBSETS if subset == "all" else known_subsets("musr", [subset], MUSR_SUBSETS)
        # the tasks are the set's splits: each "config" is loaded as a split (see _hub_split)
        return HubSet(self.config.dataset_name, subset, tasks, subset_field="_task")

    def load_rows(self) -> list[Row]:
        from atroposlib.evals import load_eval_rows

        return load_eval_rows(self.config.dataset_path, self.hub_set(), self.required_fields, _hub_split)

    def question(self, row: Row) -> MCQuestion:
        data = row.data
        choices = data["choices"]
        if isinstance(choices, str):
            try:
                choices = ast.literal_eval(choices)
            except (ValueError, SyntaxError):
                raise RowError("choices", "must be a list of options (or its Python text)") from None
        task = str(data.get("_task") or row.subset or self.config.subset)
        return MCQuestion(
            f"{data['narrative']}\n\n{data['question']}",
            list(choices),
            answer_index(data["answer_index"], len(choices), "answer_index"),
            groups={"task": task},
        )

    def format_prompt(self, question: MCQuestion) -> str:
        numbers = ", ".join(str(i + 1) for i in range(len(question.choices)))
        return self.prompt_template.format(
            question=question.question, choices=self.format_choices(question.choices), valid_letters=numbers
        )


if __name__ == "__main__":
    MuSREvalEnv.cli()
