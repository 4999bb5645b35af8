"""MATH: the full MATH test set (5,000 competition problems in seven subjects), answered in ``\\boxed{}``.

Data: ``DigitalLearningGmbH/MATH-lighteval`` on the hub, one configuration per subject (``--env.subsets``,
default all seven: algebra, counting_and_probability, geometry, intermediate_algebra, number_theory,
prealgebra, precalculus), split ``test``. ``--env.dataset_path`` reads a local file in the hub schema
(``problem``, ``level``, ``type``, ``solution``: the worked solution, whose last ``\\boxed{}`` is the gold)
or a directory of per-subset files (``algebra.jsonl`` ...).

Prompt (the original's): "Solve the following math problem step by step." with lighteval's answer line
(``--env.include_hope_suffix false``: a plain ``\\boxed{}``). Scoring: the boxed answer after any think
block equals the gold by ``math_verify``, checked in worker processes with a time limit; two different boxed
answers, no box, an unclosed ``<think>`` or an empty reply are wrong.

Reports: accuracy with its standard error, by subset and by level (pass@k, mean@k, maj@k with
``--env.pass_at_n_samples``), ``eval/no_answer_rate``, ``eval/hedge_rate``, ``eval/unclosed_think_rate``.

``python environments/eval_environments/math_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/math``
"""

from __future__ import annotations

from pydantic import Field

from atroposlib.envs.data_loading import DatasetError
from atroposlib.evals import HubSet, Row
from atroposlib.evals.math import MathEval, MathEvalConfig, solution_gold

#: The configurations of the hub set (one per subject).
MATH_SUBSETS = [
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
]
#: The ``type`` values of the rows, by configuration.
SUBSET_OF_TYPE = {subset.replace("_and_", " & ").replace("_", " ").title(): subset for subset in MATH_SUBSETS}

MATH_PROMPT_TEMPLATE = """Solve the following math problem step by step. {answer_instruction}

{problem}"""


class MATHEvalConfig(MathEvalConfig):
    """MATH's settings (the original's names)."""

    dataset_name: str = Field(
        default="DigitalLearningGmbH/MATH-lighteval", description="Hugging Face data set of MATH."
    )
    subsets: list[str] = Field(default=list(MATH_SUBSETS), description="Subsets (subjects) to evaluate.")
    eval_split: str = Field(default="test", description="Split to evaluate on.")


class MATHEvalEnv(MathEval):
    """MATH (see the module docstring)."""

    name = "math_eval"
    env_config_cls = MATHEvalConfig
    config: MATHEvalConfig
    required_fields = ("problem", "solution")
    breakdowns = ("subset", "level")
    prompt_template = MATH_PROMPT_TEMPLATE

    def hub_set(self) -> HubSet:
        if not self.config.subsets:
            raise DatasetError(f"math: no subsets selected (known: {', '.join(MATH_SUBSETS)})")
        return HubSet(
            self.config.dataset_name,
            self.config.eval_split,
            tuple(self.config.subsets),
            subset_field="subset",
        )

    def load_rows(self) -> list[Row]:
        rows = super().load_rows()
        if self.config.dataset_path and set(self.config.subsets) != set(MATH_SUBSETS):
            # a single local file may hold every subject: keep the selected ones
            rows = [row for row in rows if self._subset(row) in self.config.subsets]
        return rows

    @staticmethod
    def _subset(row: Row) -> str:
        if row.subset:
            return row.subset
        kind = str(row.data.get("type") or "")
        return SUBSET_OF_TYPE.get(kind, str(row.data.get("subset") or kind or "unknown"))

    def gold(self, row: Row) -> str:
        return solution_gold(row.data["solution"])

    def groups(self, row: Row) -> dict[str, str]:
        return {"subset": self._subset(row), "level": str(row.data.get("level") or "unknown")}

    def fields(self, row: Row) -> dict:
        return {"subset": self._subset(row), "level": row.data.get("level"), "type": row.data.get("type")}


if __name__ == "__main__":
    MATHEvalEnv.cli()
