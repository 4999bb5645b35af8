"""WinoGrande: fill the blank of a sentence with one of two options (pronoun resolution at scale).

Data: ``allenai/winogrande``, configuration ``winogrande_xl`` (``--env.subset``), split ``validation``.
``--env.dataset_path`` reads a local file in the hub schema (``sentence`` with a ``_``, ``option1``,
``option2``, ``answer``: ``1`` or ``2``).

Prompt: the sentence, the options as ``A. ...`` / ``B. ...``, the letter inside ``<answer></answer>``.
Scoring: the letter the eval core reads. Reports accuracy with its standard error.

``python environments/eval_environments/winogrande_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/winogrande``
"""

from __future__ import annotations

from pydantic import Field

from atroposlib.evals import EvalConfig, MCQuestion, MultipleChoiceEval, Row, RowError

WINOGRANDE_PROMPT_TEMPLATE = """The following is a fill-in-the-blank question about commonsense reasoning.

Sentence: {question}

Choose the word or phrase that best fills the blank:
{choices}

Provide your answer in <answer></answer> tags with only the letter (A or B)."""


class WinoGrandeEvalConfig(EvalConfig):
    """WinoGrande's settings."""

    dataset_name: str = Field(
        default="allenai/winogrande", description="Hugging Face data set of WinoGrande."
    )
    subset: str = Field(default="winogrande_xl", description="winogrande_xl, _l, _m, _s or _xs.")
    eval_split: str = Field(default="validation", description="Split to evaluate on.")


class WinoGrandeEvalEnv(MultipleChoiceEval):
    """WinoGrande (see the module docstring)."""

    name = "winogrande_eval"
    env_config_cls = WinoGrandeEvalConfig
    required_fields = ("sentence", "option1", "option2", "answer")
    prompt_template = WINOGRANDE_PROMPT_TEMPLATE
    choice_template = "{label}. {choice}"

    def question(self, row: Row) -> MCQuestion:
        data = row.data
        answer = str(data["answer"]).strip()
        if answer not in ("1", "2"):
            raise RowError("answer", f"must be 1 or 2, got {data['answer']!r}")
        return MCQuestion(str(data["sentence"]), [data["option1"], data["option2"]], int(answer) - 1)


if __name__ == "__main__":
    WinoGrandeEvalEnv.cli()
