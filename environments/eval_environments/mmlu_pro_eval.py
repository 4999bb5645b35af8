"""MMLU-Pro (generative): 12k ten-option questions across 14 disciplines, answered after reasoning.

Data: ``TIGER-Lab/MMLU-Pro``, split ``test``; ``--env.categories`` keeps some disciplines. ``--env.dataset_path``
reads a local file in the hub schema (``question``, ``options``: the option texts, ``answer_index``,
``category``). ``--env.num_few_shot K`` (0-5) puts the first K ``validation`` questions of the same discipline,
answered, before each question (``--env.few_shot_dataset_path`` for a local copy).

Prompt: lighteval's generative template, options as ``A: ...``. Scoring: the letter the eval core reads
(``<answer>B</answer>``, ``\\boxed{B}``, ``Answer: B`` or a trailing letter; two letters or an unclosed think
block are wrong). Reports accuracy with its standard error, and by discipline.

``python environments/eval_environments/mmlu_pro_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/mmlu_pro``
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
    load_eval_rows,
)


class MMLUProEvalConfig(EvalConfig):
    """MMLU-Pro's settings."""

    dataset_name: str = Field(default="TIGER-Lab/MMLU-Pro", description="Hugging Face data set of MMLU-Pro.")
    eval_split: str = Field(default="test", description="Split to evaluate on.")
    categories: Optional[list[str]] = Field(
        default=None, description="Disciplines to evaluate (default: all)."
    )
    few_shot_split: str = Field(default="validation", description="Split the few-shot examples come from.")
    few_shot_dataset_path: Optional[str] = Field(
        default=None, description="Local file of the few-shot split."
    )
    num_few_shot: int = Field(default=0, ge=0, le=5, description="Answered examples before each question.")


class MMLUProEvalEnv(MultipleChoiceEval):
    """MMLU-Pro (see the module docstring)."""

    name = "mmlu_pro_eval"
    env_config_cls = MMLUProEvalConfig
    config: MMLUProEvalConfig
    required_fields = ("question", "options", "answer_index")
    breakdowns = ("discipline",)
    choice_template = "{label}: {choice}"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        #: discipline -> answered examples of the few-shot split (filled by ``load_rows``)
        self.few_shot: dict[str, list[MCQuestion]] = {}

    def _wanted(self, row: Row) -> bool:
        wanted = {c.lower() for c in self.config.categories or ()}
        return not wanted or str(row.data.get("category", "")).lower() in wanted

    def load_rows(self) -> list[Row]:
        rows = [row for row in super().load_rows() if self._wanted(row)]
        if self.config.num_few_shot:
            hub = HubSet(self.config.dataset_name, self.config.few_shot_split)
            for row in load_eval_rows(self.config.few_shot_dataset_path, hub, self.required_fields):
                question = self.question(row)
                self.few_shot.setdefault(question.groups["discipline"], []).append(question)
        return rows

    def question(self, row: Row) -> MCQuestion:
        data = row.data
        options = list(data["options"])
        discipline = str(data.get("category") or "other")
        return MCQuestion(
            str(data["question"]),
            options,
            answer_index(data["answer_index"], len(options), "answer_index"),
            id=str(data["question_id"]) if data.get("question_id") is not None else None,
            groups={"discipline": discipline},
            fields={"category": discipline},
        )

    def format_prompt(self, question: MCQuestion) -> str:
        examples = self.few_shot.get(question.groups["discipline"], [])[: self.config.num_few_shot]
        return self.few_shot_block(examples) + super().format_prompt(question)


if __name__ == "__main__":
    MMLUProEvalEnv.cli()
