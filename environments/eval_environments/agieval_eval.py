"""AGIEval (generative): multiple-choice questions from admission and qualification exams.

Data: one hub set per exam, ``dmayhem93/agieval-<exam>``, split ``test``. ``--env.subsets`` chooses exams
(default: the English ones, or every exam with ``--env.english_only false``). ``--env.dataset_path`` reads a
local file in the hub schema (``query``, ``choices``, ``gold``: a list holding the right option's index) or a
directory of per-exam files (``sat-math.jsonl`` ...).

Prompt: the generative template (the letter inside ``<answer></answer>``), options as ``A) ...`` with the
data's own ``(A)`` prefixes removed. Scoring: the letter the eval core reads. Reports accuracy with its
standard error, and by exam.

``python environments/eval_environments/agieval_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/agieval``
"""

from __future__ import annotations

import re
from typing import Optional

from pydantic import Field

from atroposlib.evals import (
    EvalConfig,
    HubSet,
    MCQuestion,
    MultipleChoiceEval,
    Row,
    RowError,
    answer_index,
    known_subsets,
)

AGIEVAL_ENGLISH_SUBSETS = (
    "aqua-rat", "logiqa-en", "lsat-ar", "lsat-lr", "lsat-rc", "sat-en", "sat-en-without-passage", "sat-math",
)  # fmt: skip
AGIEVAL_CHINESE_SUBSETS = (
    "gaokao-biology", "gaokao-chemistry", "gaokao-chinese", "gaokao-english", "gaokao-geography",
    "gaokao-history", "gaokao-mathqa", "gaokao-physics", "logiqa-zh",
)  # fmt: skip
AGIEVAL_SUBSETS = AGIEVAL_ENGLISH_SUBSETS + AGIEVAL_CHINESE_SUBSETS
_LABEL_PREFIX = re.compile(r"^\s*\([A-J]\)\s*")


class AGIEvalConfig(EvalConfig):
    """AGIEval's settings."""

    dataset_name: str = Field(default="dmayhem93/agieval-{config}", description="Hub set of each exam.")
    subsets: Optional[list[str]] = Field(
        default=None, description="Exams to evaluate (default: see english_only)."
    )
    english_only: bool = Field(default=True, description="Without subsets: the English exams only.")
    eval_split: str = Field(default="test", description="Split to evaluate on.")


class AGIEvalEnv(MultipleChoiceEval):
    """AGIEval (see the module docstring)."""

    name = "agieval_eval"
    env_config_cls = AGIEvalConfig
    config: AGIEvalConfig
    required_fields = ("query", "choices", "gold")
    breakdowns = ("exam",)

    def hub_set(self) -> HubSet:
        cfg = self.config
        subsets = cfg.subsets or (AGIEVAL_ENGLISH_SUBSETS if cfg.english_only else AGIEVAL_SUBSETS)
        exams = known_subsets("agieval", subsets, AGIEVAL_SUBSETS)
        return HubSet(cfg.dataset_name, cfg.eval_split, exams, subset_field="_subset")

    def question(self, row: Row) -> MCQuestion:
        data = row.data
        choices = [_LABEL_PREFIX.sub("", str(c)).strip() for c in data["choices"]]
        gold = data["gold"]
        if isinstance(gold, list):
            if len(gold) != 1:
                raise RowError("gold", f"must hold one option index, got {gold!r}")
            gold = gold[0]
        exam = str(data.get("_subset") or row.subset or "agieval")
        return MCQuestion(
            str(data["query"]), choices, answer_index(gold, len(choices), "gold"), groups={"exam": exam}
        )


if __name__ == "__main__":
    AGIEvalEnv.cli()
