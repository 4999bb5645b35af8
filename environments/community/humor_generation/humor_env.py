"""Humor generation: jokes in a given comedian's style and format, scored by an LLM judge on a rubric.

Each item names a comedian and a joke format (haiku, one-liner, q/a over sms) and asks the policy, as a
single user turn, which local model would write such jokes best, with its reasoning and three example jokes.
The reply may reason first in ``<think>...</think>``; only the text after it is judged.

Reward: a judge scores the reply on the original's six-part rubric - relevance to the format (0-2), style
consistency with the comedian (0-2), creativity, humor effectiveness, virality and cognitive coherence (0-3
each) - one ``Score: <n>`` line per criterion, in order; the reward is the total over 16 (0.0 to 1.0). A
verdict that is not exactly six whole-number scores within their ranges is a judge failure: the reply gets
the mean of its group's other scores (no advantage either way) and the failure is logged
(``train/judge_failures`` / ``train/judge_failure_rate``); in evaluation it is left out of the means and
counted in ``eval/unscored``. Scored 0.0 without asking the judge: an empty reply or one whose reasoning never
closes, a reply that repeats the prompt, and a reply that writes ``Score:`` lines itself (an attempt to
answer for the judge). Evaluation reports ``eval/mean_score`` and ``eval/percent_correct`` (the share of
replies at ``score_threshold`` or above).

The judge: ``--judge.base_url`` / ``--judge.model_name`` ... (any OpenAI-compatible server), else the policy's
own servers (``_judging/policy_judge.py``).

Data: the 18 comedian x format prompts of ``humor_dataset.jsonl`` (the original's six comedians and three
formats, with its prompt). ``--env.dataset_path`` (the original's ``data_path``) and
``--env.eval_dataset_path`` read local rows in the same schema: ``comedian``, ``format``, ``question`` (other
fields, such as the original generator's ``response``, are ignored); evaluation uses the training rows unless
an evaluation file is given.

``python environments/community/humor_generation/humor_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from pydantic import Field

# Run as a script, the repository root is not on the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from atroposlib.envs.data_loading import DatasetError, check_rows, read_local_rows  # noqa: E402
from atroposlib.envs.declared_defaults import DeclaredDefaults  # noqa: E402
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig  # noqa: E402
from atroposlib.evals.judge import Judgement  # noqa: E402
from atroposlib.utils.replies import answer_section  # noqa: E402
from environments.community._judging.policy_judge import (  # noqa: E402
    JudgedGrades,
    PolicyJudgeMixin,
    PolicyJudgeSettings,
)

DATASET = Path(__file__).resolve().parent / "humor_dataset.jsonl"
FIELDS = ("comedian", "format", "question")
#: The rubric: (criterion, highest score); ``{format}`` and ``{comedian}`` are the item's.
RUBRIC = (
    ("Relevance to the format ({format})", 2),
    ("Style consistency ({comedian})", 2),
    ("Creativity", 3),
    ("Humor effectiveness", 3),
    ("Virality", 3),
    ("Cognitive coherence", 3),
)
MAX_TOTAL = sum(top for _, top in RUBRIC)
JUDGE_TEMPLATE = """Evaluate the jokes below, written as {format} jokes in the style of {comedian}.

[Jokes]
{jokes}
[End of jokes]

Score them on each criterion, in this order:
{criteria}

You may think first inside <think> </think> tags. Then give each score on its own line as 'Score: <number>',
six lines in the order above, whole numbers only."""
_SCORE = re.compile(r"score\s*:\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)


@dataclass(frozen=True)
class HumorItem:
    """One prompt: the ``comedian``, the joke ``format`` and the ``question`` asked."""

    comedian: str
    format: str
    question: str


def items_from_rows(rows: Sequence[dict[str, Any]], source: str) -> list[HumorItem]:
    """Items of rows in the shipped schema; :class:`DatasetError` naming the source, row and field when one is
    missing or not non-empty text."""
    check_rows(rows, FIELDS, source)
    for index, row in enumerate(rows):
        for name in FIELDS:
            if not isinstance(row[name], str) or not row[name].strip():
                raise DatasetError(f"{source}: row {index}: field {name!r} must be non-empty text")
    return [HumorItem(*(row[name].strip() for name in FIELDS)) for row in rows]


def rubric_lines(item: HumorItem) -> str:
    """The numbered criteria with their ranges, for the judge."""
    return "\n".join(
        f"{n}. {name.format(format=item.format, comedian=item.comedian)}: Score: X (0-{top})"
        for n, (name, top) in enumerate(RUBRIC, start=1)
    )


def parse_rubric(judgement: str) -> Optional[float]:
    """The reward of a judge's verdict: six whole-number scores within their ranges, totalled over
    :data:`MAX_TOTAL`; None for anything else."""
    values = _SCORE.findall(judgement)
    if len(values) != len(RUBRIC) or any("." in v for v in values):
        return None
    scores = [int(v) for v in values]
    if any(not 0 <= s <= top for s, (_, top) in zip(scores, RUBRIC, strict=True)):
        return None
    return sum(scores) / MAX_TOTAL


def unjudgeable(reply: str, item: HumorItem) -> bool:
    """Whether a reply scores 0.0 without the judge: empty or unclosed reasoning, the prompt repeated, or
    ``Score:`` lines written for the judge."""
    jokes = answer_section(reply)
    if jokes is None or not jokes.strip():
        return True
    squeeze = " ".join(jokes.split()).lower()
    return " ".join(item.question.split()).lower() in squeeze or _SCORE.search(jokes) is not None


class HumorEnvConfig(PolicyJudgeSettings, SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the data source, the judge and the evaluation threshold."""

    original_key_aliases: ClassVar[dict[str, str]] = {"data_path": "dataset_path"}

    dataset_path: Optional[str] = Field(
        None, description="local prompts (comedian, format, question); default: the shipped 18"
    )
    eval_dataset_path: Optional[str] = Field(
        None, description="local evaluation prompts (default: the training ones)"
    )
    judge_max_tokens: int = Field(512, ge=0, description="token budget of one judgement (0: the server's)")
    score_threshold: float = Field(
        0.75, ge=0.0, le=1.0, description="rubric share at which an evaluation reply counts as correct"
    )


class HumorEnv(PolicyJudgeMixin, DeclaredDefaults, JudgedGrades, SingleTurnEnv):
    """Jokes scored by a judge on the rubric (see the module docstring)."""

    name = "humor"
    env_config_cls = HumorEnvConfig
    config: HumorEnvConfig
    default_env_values = dict(
        group_size=2, total_steps=1000, batch_size=1024, steps_per_eval=100, max_token_length=2048
    )

    @property
    def correct_threshold(self) -> float:  # type: ignore[override]
        return self.config.score_threshold

    async def setup(self) -> None:
        path = self.config.dataset_path or DATASET
        self.train = items_from_rows(read_local_rows(path), str(path))
        eval_path = self.config.eval_dataset_path
        self.test = items_from_rows(read_local_rows(eval_path), eval_path) if eval_path else list(self.train)

    def prompt_messages(self, item: HumorItem) -> list[dict[str, str]]:
        return [{"role": "user", "content": item.question}]

    # -- reward -----------------------------------------------------------------------------------------
    def judge_messages(self, reply: str, item: HumorItem) -> list[dict[str, str]]:
        """The judge's chat grading the text after ``reply``'s reasoning."""
        jokes = (answer_section(reply) or "").strip()
        user = JUDGE_TEMPLATE.format(
            format=item.format, comedian=item.comedian, jokes=jokes, criteria=rubric_lines(item)
        )
        return [{"role": "user", "content": user}]

    async def grade(self, reply: str, item: HumorItem) -> Optional[Judgement[float]]:
        """The judge's verdict on ``reply`` (None: scored 0.0 without the judge, see :func:`unjudgeable`)."""
        if unjudgeable(reply, item):
            return None
        return await self.judge.grade(self.judge_messages(reply, item), parse_rubric)

    def eval_sample_fields(self, item: HumorItem) -> dict[str, Any]:
        return {"comedian": item.comedian, "format": item.format}


if __name__ == "__main__":
    HumorEnv.cli()
