"""OpenBookQA: elementary science questions that need common sense beside a fact.

Data: ``allenai/openbookqa``, configuration ``main``, split ``test``. ``--env.dataset_path`` reads a local file
in the hub schema (``question_stem``, ``choices``: ``{"text": [...], "label": [...]}``, ``answerKey``).

Prompt: the common-sense template (think step by step, the letter inside ``<answer></answer>``, options as
``A. ...``). Scoring: the letter the eval core reads. Reports accuracy with its standard error.

``python environments/eval_environments/obqa_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/obqa``
"""

from __future__ import annotations

from pydantic import Field

from atroposlib.evals import EvalConfig, MCQuestion, MultipleChoiceEval, Row, labelled_choices

OBQA_PROMPT_TEMPLATE = """Answer the following multiple choice question about common sense. Think step by step before answering.

Provide your final answer within <answer></answer> tags, containing only the letter ({valid_letters}).

Example format:
<answer>A</answer>

Question: {question}
{choices}"""


class OBQAEvalConfig(EvalConfig):
    """OpenBookQA's settings."""

    dataset_name: str = Field(
        default="allenai/openbookqa", description="Hugging Face data set of OpenBookQA."
    )
    subset: str = Field(default="main", description="Configuration: main or additional.")
    eval_split: str = Field(default="test", description="Split to evaluate on.")


class OBQAEvalEnv(MultipleChoiceEval):
    """OpenBookQA (see the module docstring)."""

    name = "obqa_eval"
    env_config_cls = OBQAEvalConfig
    required_fields = ("question_stem", "choices", "answerKey")
    prompt_template = OBQA_PROMPT_TEMPLATE
    choice_template = "{label}. {choice}"

    def question(self, row: Row) -> MCQuestion:
        choices, answer = labelled_choices(row, "answerKey")
        return MCQuestion(str(row.data["question_stem"]), choices, answer, id=row.data.get("id"))

    def format_prompt(self, question: MCQuestion) -> str:
        letters = ", ".join(chr(ord("A") + i) for i in range(len(question.choices)))
        return self.prompt_template.format(
            question=question.question, choices=self.format_choices(question.choices), valid_letters=letters
        )


if __name__ == "__main__":
    OBQAEvalEnv.cli()
