"""ARC (AI2 Reasoning Challenge): grade-school science questions, Challenge and Easy.

Data: ``allenai/ai2_arc``, configuration ``ARC-Challenge`` (``--env.subset ARC-Easy``, or both as
``ARC-Easy,ARC-Challenge``), split ``test``. ``--env.dataset_path`` reads a local file in the hub schema
(``question``, ``choices``: ``{"text": [...], "label": [...]}``, ``answerKey``) or a directory of per-subset
files (``ARC-Easy.jsonl``, ``ARC-Challenge.jsonl``). Labels given as ``1``-``4`` are shown as ``A``-``D``.

Prompt: the science-question template (options as ``A. ...``, the letter inside ``<answer></answer>``).
Scoring: the letter the eval core reads. Reports accuracy with its standard error, and by subset.

``python environments/eval_environments/arc_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.subset ARC-Easy,ARC-Challenge --env.data_dir_to_save_evals evals/arc``
"""

from __future__ import annotations

from pydantic import Field

from atroposlib.evals import EvalConfig, HubSet, MCQuestion, MultipleChoiceEval, Row, labelled_choices

ARC_PROMPT_TEMPLATE = """The following is a multiple choice science question.

Question: {question}
{choices}

Provide your answer in <answer></answer> tags with only the letter of the correct choice."""


class ARCEvalConfig(EvalConfig):
    """ARC's settings."""

    dataset_name: str = Field(default="allenai/ai2_arc", description="Hugging Face data set of ARC.")
    subset: str = Field(
        default="ARC-Challenge", description="ARC-Challenge, ARC-Easy, or both separated by a comma."
    )
    eval_split: str = Field(default="test", description="Split to evaluate on.")


class ARCEvalEnv(MultipleChoiceEval):
    """ARC (see the module docstring)."""

    name = "arc_eval"
    env_config_cls = ARCEvalConfig
    config: ARCEvalConfig
    required_fields = ("question", "choices", "answerKey")
    breakdowns = ("subset",)
    prompt_template = ARC_PROMPT_TEMPLATE
    choice_template = "{label}. {choice}"

    def hub_set(self) -> HubSet:
        subsets = tuple(s.strip() for s in self.config.subset.split(",") if s.strip())
        return HubSet(self.config.dataset_name, self.config.eval_split, subsets, subset_field="_subset")

    def question(self, row: Row) -> MCQuestion:
        choices, answer = labelled_choices(row, "answerKey")
        subset = str(row.data.get("_subset") or row.subset or self.config.subset)
        return MCQuestion(
            str(row.data["question"]), choices, answer, id=row.data.get("id"), groups={"subset": subset}
        )


if __name__ == "__main__":
    ARCEvalEnv.cli()
