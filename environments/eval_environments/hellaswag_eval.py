"""HellaSwag: pick the most plausible continuation of an everyday scene (four endings).

Data: ``Rowan/hellaswag``, split ``validation``. ``--env.dataset_path`` reads a local file in the hub schema
(``activity_label``, ``ctx_a``, ``ctx_b``, ``endings``, ``label``: the right ending's index).

Prompt: the common-sense template (context as ``activity: ctx_a Ctx_b``, endings as ``A. ...``, the letter
inside ``<answer></answer>``). Scoring: the letter the eval core reads. Reports accuracy with its standard
error.

``python environments/eval_environments/hellaswag_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/hellaswag``
"""

from __future__ import annotations

from pydantic import Field

from atroposlib.evals import EvalConfig, MCQuestion, MultipleChoiceEval, Row, answer_index

HELLASWAG_PROMPT_TEMPLATE = """The following are multiple choice questions (with answers) about common sense.

Question: {question}
{choices}

Provide your answer in <answer></answer> tags with only the letter of the correct choice."""


class HellaSwagEvalConfig(EvalConfig):
    """HellaSwag's settings."""

    dataset_name: str = Field(default="Rowan/hellaswag", description="Hugging Face data set of HellaSwag.")
    eval_split: str = Field(default="validation", description="Split to evaluate on.")


class HellaSwagEvalEnv(MultipleChoiceEval):
    """HellaSwag (see the module docstring)."""

    name = "hellaswag_eval"
    env_config_cls = HellaSwagEvalConfig
    required_fields = ("ctx_a", "ctx_b", "endings", "label")
    prompt_template = HELLASWAG_PROMPT_TEMPLATE
    choice_template = "{label}. {choice}"

    def question(self, row: Row) -> MCQuestion:
        data = row.data
        context = f"{data.get('activity_label', '')}: {data['ctx_a']} {str(data['ctx_b']).capitalize()}"
        endings = list(data["endings"])
        return MCQuestion(
            context, endings, answer_index(data["label"], len(endings), "label"), id=data.get("ind")
        )


if __name__ == "__main__":
    HellaSwagEvalEnv.cli()
