"""MATH-500: the 500 MATH test problems of OpenAI's "Let's Verify Step by Step", answered in ``\\boxed{}``.

Data: ``HuggingFaceH4/MATH-500`` on the hub, split ``test`` (``--env.eval_split``). ``--env.dataset_path``
reads a local file in the hub schema (``problem``, ``solution``, ``answer``, ``subject``, ``level``,
``unique_id``; without ``answer`` the last box of ``solution`` is the gold).

Prompt (the original's): "Solve the following math problem." with lighteval's answer line
(``--env.include_hope_suffix false``: a plain ``\\boxed{}``); ``--env.use_original_prompt true`` sends
lighteval's MATH-500 prompt instead (an ``ANSWER:`` line, and the answer boxed too). Scoring: the boxed answer
after any think block equals the gold by ``math_verify`` (``0.5`` = ``\\frac{1}{2}``, ``x = 4`` = ``4``),
checked in worker processes with a time limit; two different boxed answers, no box, an unclosed ``<think>``
or an empty reply are wrong.

Reports: accuracy with its standard error, by subject and by level (pass@k, mean@k, maj@k with
``--env.pass_at_n_samples``), ``eval/no_answer_rate``, ``eval/hedge_rate``, ``eval/unclosed_think_rate``.

``python environments/eval_environments/math500_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/math500``
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from atroposlib.evals import HubSet, Row
from atroposlib.evals.math import MathEval, MathEvalConfig, gold_latex

#: lighteval's MATH-500 prompt (``use_original_prompt``), with the answer boxed as well.
MATH500_PROMPT_TEMPLATE = """Solve the following problem. The final line of your response MUST be of the following format:
"ANSWER: $ANSWER" (without quotes) where $ANSWER is the final answer. Think step by step before answering.

However, for reliable parsing, also put your final answer in \\boxed{{}} format.

{problem}"""

MATH500_BOXED_PROMPT_TEMPLATE = """Solve the following math problem. {answer_instruction}

{problem}"""


class MATH500EvalConfig(MathEvalConfig):
    """MATH-500's settings (the original's names)."""

    dataset_name: str = Field(
        default="HuggingFaceH4/MATH-500", description="Hugging Face data set of MATH-500."
    )
    subset: str = Field(default="default", description="Its configuration ('default': the only one).")
    eval_split: str = Field(default="test", description="Split to evaluate on.")
    use_original_prompt: bool = Field(
        default=False, description="Send lighteval's MATH-500 prompt (ANSWER: line) instead of the boxed one."
    )


class MATH500EvalEnv(MathEval):
    """MATH-500 (see the module docstring)."""

    name = "math500_eval"
    env_config_cls = MATH500EvalConfig
    config: MATH500EvalConfig
    required_fields = ("problem",)
    breakdowns = ("subject", "level")
    prompt_template = MATH500_BOXED_PROMPT_TEMPLATE

    def hub_set(self) -> HubSet:
        subset: Optional[str] = None if self.config.subset == "default" else self.config.subset
        return HubSet(self.config.dataset_name, self.config.eval_split, (subset,))

    def gold(self, row: Row) -> str:
        answer = row.data.get("answer")
        if answer not in (None, ""):
            return gold_latex(answer)
        return gold_latex(row.data.get("solution") or "")

    def groups(self, row: Row) -> dict[str, str]:
        data = row.data
        level = data.get("level")
        return {
            "subject": str(data.get("subject") or "unknown"),
            "level": str(level) if level not in (None, "") else "unknown",
        }

    def fields(self, row: Row) -> dict:
        return {"subject": row.data.get("subject"), "level": row.data.get("level")}

    def format_prompt(self, problem: str) -> str:
        if self.config.use_original_prompt:
            return MATH500_PROMPT_TEMPLATE.format(problem=problem)
        return super().format_prompt(problem)


if __name__ == "__main__":
    MATH500EvalEnv.cli()
