"""BIG-Bench Hard: 18 multiple-choice reasoning tasks.

Data: ``lighteval/bbh``, one configuration per task (``--env.subset`` names one, default ``all``), split
``train``. ``--env.dataset_path`` reads a local file in the hub schema (``input``, ``choices``, ``target_idx``,
optionally ``task_prefix``, ``example_input_prefix``, ``choice_prefix``) or a directory of per-task files
(``navigate.jsonl`` ...). Rows without options are skipped.

Prompt: think step by step, the letter inside ``<answer></answer>``, then the task's own prefixes, the input
and the options as ``A. ...``. Scoring: the letter the eval core reads. Reports accuracy with its standard
error, and by task.

``python environments/eval_environments/bbh_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/bbh``
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from atroposlib.evals import (
    EvalConfig,
    HubSet,
    MCQuestion,
    MultipleChoiceEval,
    Row,
    answer_index,
    known_subsets,
    option_labels,
)

BBH_SUBSETS = (
    "causal_judgement", "date_understanding", "disambiguation_qa", "geometric_shapes",
    "logical_deduction_five_objects", "logical_deduction_seven_objects", "logical_deduction_three_objects",
    "movie_recommendation", "navigate", "reasoning_about_colored_objects", "ruin_names",
    "salient_translation_error_detection", "snarks", "sports_understanding", "temporal_sequences",
    "tracking_shuffled_objects_five_objects", "tracking_shuffled_objects_seven_objects",
    "tracking_shuffled_objects_three_objects",
)  # fmt: skip

BBH_HEADER = """Answer the following question. Think step by step before answering.

Provide your final answer within <answer></answer> tags, containing only the letter ({valid_letters}).

Example format:
<answer>A</answer>

"""


class BBHEvalConfig(EvalConfig):
    """BBH's settings."""

    dataset_name: str = Field(default="lighteval/bbh", description="Hugging Face data set of BBH.")
    subset: str = Field(default="all", description="One task, or 'all' for the 18 tasks.")
    eval_split: str = Field(default="train", description="Split to evaluate on (BBH has only train).")


class BBHEvalEnv(MultipleChoiceEval):
    """BIG-Bench Hard (see the module docstring)."""

    name = "bbh_eval"
    env_config_cls = BBHEvalConfig
    config: BBHEvalConfig
    required_fields = ("input", "choices", "target_idx")
    breakdowns = ("task",)

    def hub_set(self) -> HubSet:
        subset = self.config.subset
        tasks = BBH_SUBSETS if subset.lower() == "all" else known_subsets("bbh", [subset], BBH_SUBSETS)
        return HubSet(self.config.dataset_name, self.config.eval_split, tasks, subset_field="_task")

    def question(self, row: Row) -> Optional[MCQuestion]:
        data = row.data
        choices = list(data["choices"])
        if not choices:
            return None
        task = str(data.get("_task") or row.subset or self.config.subset)
        text = (
            str(data.get("task_prefix") or "")
            + str(data.get("example_input_prefix", "\nQuestion: "))
            + str(data["input"])
            + str(data.get("choice_prefix", "\n  Choices: "))
        )
        return MCQuestion(
            text,
            choices,
            answer_index(data["target_idx"], len(choices), "target_idx"),
            groups={"task": task},
            fields={"input": data["input"]},
        )

    def format_prompt(self, question: MCQuestion) -> str:
        letters = option_labels(len(question.choices))
        listed = ", ".join(letters[:-1]) + f", or {letters[-1]}" if len(letters) > 1 else letters[0]
        options = "".join(
            f"\n{label}. {choice}" for label, choice in zip(letters, question.choices, strict=True)
        )
        return BBH_HEADER.format(valid_letters=listed) + question.question + options


if __name__ == "__main__":
    BBHEvalEnv.cli()
