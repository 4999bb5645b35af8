"""AIMO: the problems of the AI Mathematical Olympiad's first Progress Prize (Kaggle), integer answers.

Data: ``lighteval/aimo_progress_prize_1`` on the hub, split ``train``. ``--env.dataset_path`` reads a local
file in the hub schema (``id``, ``problem``, ``answer``).

Prompt (the original's): "Solve the following mathematical olympiad problem." with lighteval's answer line
(``--env.include_hope_suffix false``: a plain ``\\boxed{}``). Scoring: the boxed answer after any think block
equals the gold by ``math_verify``, checked in worker processes with a time limit; two different boxed
answers, no box, an unclosed ``<think>`` or an empty reply are wrong.

Reports: accuracy with its standard error (pass@k, mean@k, maj@k with ``--env.pass_at_n_samples``),
``eval/no_answer_rate``, ``eval/hedge_rate``, ``eval/unclosed_think_rate``.

``python environments/eval_environments/aimo_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/aimo``
"""

from __future__ import annotations

from pydantic import Field

from atroposlib.evals.math import MathEval, MathEvalConfig

AIMO_PROMPT_TEMPLATE = """Solve the following mathematical olympiad problem. {answer_instruction}

{problem}"""


class AIMOEvalConfig(MathEvalConfig):
    """AIMO's settings (the original's names)."""

    dataset_name: str = Field(
        default="lighteval/aimo_progress_prize_1", description="Hugging Face data set of AIMO."
    )
    eval_split: str = Field(default="train", description="Split to evaluate on (the set has only train).")


class AIMOEvalEnv(MathEval):
    """AIMO (see the module docstring)."""

    name = "aimo_eval"
    env_config_cls = AIMOEvalConfig
    config: AIMOEvalConfig
    required_fields = ("problem", "answer")
    prompt_template = AIMO_PROMPT_TEMPLATE


if __name__ == "__main__":
    AIMOEvalEnv.cli()
