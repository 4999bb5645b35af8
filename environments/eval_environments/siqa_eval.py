"""Social IQa: social common sense, three answers about people's motives and reactions.

Data: ``allenai/social_i_qa``, split ``validation``. ``--env.dataset_path`` reads a local file in the hub
schema (``context``, ``question``, ``answerA``, ``answerB``, ``answerC``, ``label``: ``1`` to ``3``).

Prompt: the context, the question, the answers as ``A. ...``, the letter inside ``<answer></answer>``.
Scoring: the letter the eval core reads. Reports accuracy with its standard error.

``python environments/eval_environments/siqa_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/siqa``
"""

from __future__ import annotations

from pydantic import Field

from atroposlib.evals import EvalConfig, MCQuestion, MultipleChoiceEval, Row, RowError

SIQA_PROMPT_TEMPLATE = """The following is a multiple choice question about social common sense.

Context: {context}

Question: {question}
{choices}

Provide your answer in <answer></answer> tags with only the letter (A, B, or C)."""


class SIQAEvalConfig(EvalConfig):
    """Social IQa's settings."""

    dataset_name: str = Field(default="allenai/social_i_qa", description="Hugging Face data set of SIQA.")
    eval_split: str = Field(default="validation", description="Split to evaluate on.")


class SIQAEvalEnv(MultipleChoiceEval):
    """Social IQa (see the module docstring)."""

    name = "siqa_eval"
    env_config_cls = SIQAEvalConfig
    required_fields = ("context", "question", "answerA", "answerB", "answerC", "label")
    choice_template = "{label}. {choice}"

    def question(self, row: Row) -> MCQuestion:
        data = row.data
        label = str(data["label"]).strip()
        if label not in ("1", "2", "3"):
            raise RowError("label", f"must be 1, 2 or 3, got {data['label']!r}")
        answers = [data["answerA"], data["answerB"], data["answerC"]]
        return MCQuestion(str(data["question"]), answers, int(label) - 1, fields={"context": data["context"]})

    def format_prompt(self, question: MCQuestion) -> str:
        return SIQA_PROMPT_TEMPLATE.format(
            context=question.fields["context"],
            question=question.question,
            choices=self.format_choices(question.choices),
        )


if __name__ == "__main__":
    SIQAEvalEnv.cli()
