"""AIME: the American Invitational Mathematics Examination, 2024 and 2025, reported by year.

Data: ``HuggingFaceH4/aime_2024`` and ``yentinglin/aime_2025`` on the hub (split ``train``; ``--env.years``
chooses, default both). ``--env.dataset_path`` reads a local file in the hub schema (``problem``,
``answer``: an integer 0-999, ``year``) or a directory of per-year files (``2024.jsonl``, ``2025.jsonl``).

Prompt (the original's, after lighteval's AIME task): solve efficiently, end with ``Therefore, the final
answer is: $\\boxed{ANSWER}$. I hope it is correct``, answers are integers from 0 to 999. Scoring: the boxed
answer after any think block equals the gold by ``math_verify`` (``025`` = ``25``), checked in worker
processes with a time limit; two different boxed answers, no box, an unclosed ``<think>`` or an empty reply
are wrong. AIME is usually reported over several samples: ``--env.pass_at_n_samples 8`` gives mean@8 (the
accuracy), pass@1..8 and maj@8.

Reports: accuracy with its standard error, by year (``eval/year_2024_accuracy`` ...), pass@k / mean@k /
maj@k with several samples, ``eval/no_answer_rate``, ``eval/hedge_rate``, ``eval/unclosed_think_rate``.

``python environments/eval_environments/aime_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.pass_at_n_samples 8 --env.data_dir_to_save_evals evals/aime``
"""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import Field

from atroposlib.envs.data_loading import DatasetError
from atroposlib.evals import HubSet, Row, load_eval_rows
from atroposlib.evals.math import MathEval, MathEvalConfig

#: The hub set of each year.
AIME_DATASETS = {
    "2024": "HuggingFaceH4/aime_2024",
    "2025": "yentinglin/aime_2025",
}

AIME_PROMPT_TEMPLATE = """Solve the following math problem efficiently and clearly.

The last line of your response should be of the following format:
'Therefore, the final answer is: $\\boxed{{ANSWER}}$. I hope it is correct' (without quotes)
where ANSWER is just the final number or expression that solves the problem.

Think step by step before answering.

Note: AIME answers are always integers from 0 to 999.

{problem}"""


class AIMEEvalConfig(MathEvalConfig):
    """AIME's settings (the original's names)."""

    years: list[Union[str, int]] = Field(
        default=["2024", "2025"], description="AIME years to evaluate (2024, 2025)."
    )
    eval_split: str = Field(
        default="train", description="Split to evaluate on (the AIME sets have only train)."
    )


class AIMEHubSet(HubSet):
    """The AIME years as one hub set: a year's rows come from its own data set (:data:`AIME_DATASETS`)."""

    def describe(self, config: Optional[str] = None) -> str:
        return f"{AIME_DATASETS.get(str(config), self.name)} ({self.split})"


def _hub_rows(hub: HubSet, year: Optional[str]) -> list[dict[str, Any]]:
    from datasets import load_dataset

    return [dict(row) for row in load_dataset(AIME_DATASETS[str(year)], split=hub.split, **hub.kwargs)]


class AIMEEvalEnv(MathEval):
    """AIME (see the module docstring)."""

    name = "aime_eval"
    env_config_cls = AIMEEvalConfig
    config: AIMEEvalConfig
    required_fields = ("problem", "answer")
    breakdowns = ("year",)
    prompt_template = AIME_PROMPT_TEMPLATE

    def selected_years(self) -> list[str]:
        years = [str(year) for year in self.config.years]
        unknown = [year for year in years if year not in AIME_DATASETS]
        if unknown or not years:
            raise DatasetError(f"aime: unknown years {unknown} (known: {', '.join(AIME_DATASETS)})")
        return years

    def hub_set(self) -> HubSet:
        return AIMEHubSet("aime", self.config.eval_split, tuple(self.selected_years()), subset_field="year")

    def load_rows(self) -> list[Row]:
        hub = self.hub_set()
        rows = load_eval_rows(self.config.dataset_path, hub, self.required_fields, hub_loader=_hub_rows)
        if not self.config.dataset_path and len(hub.configs) == 1:  # one year: its rows are that year's
            return [Row(row.data, row.source, row.index, hub.configs[0]) for row in rows]
        if self.config.dataset_path:  # a single local file may hold both years
            rows = [row for row in rows if self._year(row) in hub.configs]
        return rows

    @staticmethod
    def _year(row: Row) -> str:
        return str(row.subset or row.data.get("year") or "unknown")

    def item_id(self, row: Row) -> str:
        return f"aime{self._year(row)}_{row.data.get('id', row.index)}"

    def groups(self, row: Row) -> dict[str, str]:
        return {"year": self._year(row)}

    def fields(self, row: Row) -> dict:
        return {"year": self._year(row)}


if __name__ == "__main__":
    AIMEEvalEnv.cli()
