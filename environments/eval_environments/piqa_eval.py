"""PIQA: physical common sense, which of two solutions reaches a goal.

Data: ``ybisk/piqa``, split ``validation``. ``--env.dataset_path`` reads a local file in the hub schema
(``goal``, ``sol1``, ``sol2``, ``label``: 0 or 1).

Prompt: the goal, the solutions as ``A. ...`` / ``B. ...``, the letter inside ``<answer></answer>``.
Scoring: the letter the eval core reads. Reports accuracy with its standard error.

``python environments/eval_environments/piqa_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/piqa``
"""

from __future__ import annotations

from pydantic import Field

from atroposlib.evals import EvalConfig, MCQuestion, MultipleChoiceEval, Row, answer_index

PIQA_PROMPT_TEMPLATE = """The following is a multiple choice question about physical common sense.

Goal: {question}

Which solution is more likely to achieve the goal?
{choices}

Provide your answer in <answer></answer> tags with only the letter (A or B)."""


class PIQAEvalConfig(EvalConfig):
    """PIQA's settings."""

    dataset_name: str = Field(default="ybisk/piqa", description="Hugging Face data set of PIQA.")
    eval_split: str = Field(default="validation", description="Split to evaluate on (validation or test).")


class PIQAEvalEnv(MultipleChoiceEval):
    """PIQA (see the module docstring)."""

    name = "piqa_eval"
    env_config_cls = PIQAEvalConfig
    required_fields = ("goal", "sol1", "sol2", "label")
    prompt_template = PIQA_PROMPT_TEMPLATE
    choice_template = "{label}. {choice}"

    def question(self, row: Row) -> MCQuestion:
        data = row.data
        return MCQuestion(
            str(data["goal"]), [data["sol1"], data["sol2"]], answer_index(data["label"], 2, "label")
        )


if __name__ == "__main__":
    PIQAEvalEnv.cli()
