"""GSM8K: grade-school math word problems, answered after step-by-step reasoning.

Data: ``openai/gsm8k`` on the hub, configuration ``main`` (``--env.subset``), split ``test``
(``--env.eval_split``). ``--env.dataset_path`` reads a local file in the hub schema (``question``, and
``answer``: the worked solution ending ``#### 72``).

Prompt (the original's): "Solve the following math problem step by step." with lighteval's answer line
(``Therefore, the final answer is: $\\boxed{ANSWER}$. I hope it is correct``; ``--env.include_hope_suffix
false`` asks for a plain ``\\boxed{}``). Scoring: the boxed answer after any think block equals the number
after ``####`` by ``math_verify`` (``18.0`` = ``18``, ``1,500`` = ``1500``), checked in worker processes
with a time limit; two different boxed answers, no box, an unclosed ``<think>`` or an empty reply are wrong.

Reports: accuracy with its standard error (pass@k, mean@k and maj@k with ``--env.pass_at_n_samples``),
``eval/no_answer_rate``, ``eval/hedge_rate``, ``eval/unclosed_think_rate``, ``eval/truncated_rate``.

``python environments/eval_environments/gsm8k_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/gsm8k``
"""

from __future__ import annotations

from pydantic import Field

from atroposlib.evals import Row
from atroposlib.evals.math import MathEval, MathEvalConfig, gsm8k_gold


class GSM8KEvalConfig(MathEvalConfig):
    """GSM8K's settings (the original's names)."""

    dataset_name: str = Field(default="openai/gsm8k", description="Hugging Face data set of GSM8K.")
    subset: str = Field(default="main", description="Its configuration.")
    eval_split: str = Field(default="test", description="Split to evaluate on.")


class GSM8KEvalEnv(MathEval):
    """GSM8K (see the module docstring)."""

    name = "gsm8k_eval"
    env_config_cls = GSM8KEvalConfig
    config: GSM8KEvalConfig
    required_fields = ("question", "answer")

    def problem(self, row: Row) -> str:
        return str(row.data["question"])

    def gold(self, row: Row) -> str:
        return gsm8k_gold(row.data["answer"])

    def fields(self, row: Row) -> dict:
        return {"solution": row.data["answer"]}


if __name__ == "__main__":
    GSM8KEvalEnv.cli()
