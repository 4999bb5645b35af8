"""Regex generation: write a Python regular expression from a description and example strings.

Each problem gives a description, strings that must match and strings that must not; the pattern is tested
with full matching (``re.fullmatch`` semantics). The reply may reason in ``<think>...</think>``; the pattern
is the one ``<answer>...</answer>`` after it (surrounding whitespace removed; the same pattern repeated is
fine, different ones are not).

Reward: the share of examples the pattern gets right (positives matched, negatives rejected); 0.0 for no
answer, several different answers, a pattern Python's ``re`` cannot compile, or one whose matching runs over
``match_time_limit`` seconds on an example (patterns are matched by the ``regex`` package, whose matcher can
be interrupted, so a catastrophically backtracking pattern cannot stall the environment). A reply counts as
correct at ``score_threshold`` (default 1.0). Evaluate reports ``eval/percent_correct``,
``eval/mean_score`` and the original's ``eval/avg_score``, ``eval/percent_perfect`` and
``eval/percent_valid_regex``.

Data: the 27 shipped problems (``regex_problems.jsonl``: easy, medium and hard), filtered by
``difficulties`` and split 80/20 into training and evaluation by a seeded shuffle. ``--env.dataset_path`` /
``--env.eval_dataset_path`` read local problems in the same schema: ``description``, ``positive`` and
``negative`` (lists of strings), optional ``difficulty``.

``python environments/community/regex_generation/regex_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import regex
from pydantic import Field

from atroposlib.envs.data_loading import DatasetError, check_rows, read_local_rows, seeded_split
from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.reply_fields import ReplyFields
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import answer_section

PROBLEMS = Path(__file__).resolve().parent / "regex_problems.jsonl"
DIFFICULTIES = ("easy", "medium", "hard")
SYSTEM_PROMPT = (
    "You may think before answering: put your reasoning inside <think> </think> tags.\n\n"
    "You will get a description of strings to match, strings that must match and strings that must not. "
    "Write one Python regular expression that matches a whole string exactly when it should (it is tested "
    "with re.fullmatch). Put only the pattern inside <answer> </answer> tags: no slashes, flags or quotes, "
    "for example <answer>[a-z]+</answer>."
)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass(frozen=True)
class RegexProblem:
    """One problem: its ``description``, the ``positive`` and ``negative`` examples and its ``difficulty``."""

    description: str
    positive: tuple[str, ...]
    negative: tuple[str, ...]
    difficulty: str = ""


@dataclass(frozen=True)
class RegexResult:
    """How a pattern did: ``score`` (share of examples right), whether it compiled (``valid``), and the
    positives matched and negatives rejected."""

    score: float
    valid: bool
    pos_pass: int = 0
    neg_pass: int = 0


def problems_from_rows(rows: list[dict[str, Any]], source: str) -> list[RegexProblem]:
    """Problems of rows in the shipped schema; :class:`DatasetError` naming the source, row and field when
    one is missing or not a list of strings."""
    check_rows(rows, ["description", "positive", "negative"], source)
    problems = []
    for index, row in enumerate(rows):
        for field in ("positive", "negative"):
            value = row[field]
            if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
                raise DatasetError(f"{source}: row {index}: field {field!r} must be a list of strings")
        if not row["positive"] and not row["negative"]:
            raise DatasetError(f"{source}: row {index}: fields 'positive' and 'negative' are both empty")
        problems.append(
            RegexProblem(
                str(row["description"]),
                tuple(row["positive"]),
                tuple(row["negative"]),
                str(row.get("difficulty") or ""),
            )
        )
    return problems


def problem_prompt(problem: RegexProblem) -> str:
    """The user turn: the description and the examples, each written as a Python string literal."""
    lines = [f"Description: {problem.description}", "", "Strings that SHOULD match:"]
    lines += [f"  - {s!r}" for s in problem.positive]
    lines += ["", "Strings that should NOT match:"]
    lines += [f"  - {s!r}" for s in problem.negative]
    return "\n".join(lines)


def reply_pattern(reply: str) -> Optional[str]:
    """The pattern of a reply: its one ``<answer>`` after the reasoning (stripped), or None."""
    section = answer_section(reply)
    if section is None:
        return None
    answers = {a.strip() for a in _ANSWER.findall(section)}
    if len(answers) != 1:
        return None
    pattern = answers.pop()
    return pattern or None


def check_pattern(pattern: Optional[str], problem: RegexProblem, time_limit: float = 1.0) -> RegexResult:
    """Full-match ``pattern`` against the problem's examples (see the module docstring for the score)."""
    if pattern is None:
        return RegexResult(0.0, False)
    try:
        re.compile(pattern)
        compiled = regex.compile(pattern)
    except (re.error, regex.error, RecursionError, OverflowError, ValueError):
        return RegexResult(0.0, False)
    try:
        pos = sum(compiled.fullmatch(s, timeout=time_limit) is not None for s in problem.positive)
        neg = sum(compiled.fullmatch(s, timeout=time_limit) is None for s in problem.negative)
    except TimeoutError:
        return RegexResult(0.0, True)
    total = len(problem.positive) + len(problem.negative)
    return RegexResult((pos + neg) / total, True, pos, neg)


class RegexEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the original's ``difficulties`` and ``score_threshold`` and the data source."""

    difficulties: list[str] = Field(list(DIFFICULTIES), description="difficulty levels to include")
    score_threshold: float = Field(
        1.0, ge=0.0, le=1.0, description="share of examples a reply must get right to count as correct"
    )
    dataset_path: Optional[str] = Field(None, description="local problems (default: the shipped problems)")
    eval_dataset_path: Optional[str] = Field(
        None, description="local evaluation problems (default: 20% held out)"
    )
    match_time_limit: float = Field(1.0, gt=0, description="seconds one example's match may take")
    split_seed: int = Field(42, description="seed of the 80/20 split")


class RegexEnv(DeclaredDefaults, ReplyFields, SingleTurnEnv):
    """Rewards regular expressions by the share of examples they classify right."""

    name = "regex_generation"
    env_config_cls = RegexEnvConfig
    config: RegexEnvConfig
    default_model = "NousResearch/DeepHermes-3-Llama-3-3B-Preview"
    default_env_values = dict(
        group_size=8, total_steps=2000, batch_size=12, steps_per_eval=200, max_token_length=2048
    )

    @property
    def correct_threshold(self) -> float:  # type: ignore[override]
        return self.config.score_threshold

    def _problems(self, path: Optional[str]) -> list[RegexProblem]:
        source = path or PROBLEMS
        problems = problems_from_rows(read_local_rows(source), str(source))
        unknown = sorted({p.difficulty for p in problems} - set(DIFFICULTIES) - {""})
        if unknown and not path:
            raise DatasetError(f"{source}: unknown difficulties {unknown}")
        return problems

    async def setup(self) -> None:
        cfg = self.config
        problems = [
            p
            for p in self._problems(cfg.dataset_path)
            if not p.difficulty or p.difficulty in cfg.difficulties
        ]
        if not problems:
            raise DatasetError(
                f"{cfg.dataset_path or PROBLEMS}: no problems of difficulties {cfg.difficulties}"
            )
        if cfg.eval_dataset_path:
            self.train, self.test = problems, self._problems(cfg.eval_dataset_path)
            return
        self.train, self.test = seeded_split(problems, cfg.split_seed, min_eval=2)

    def prompt_messages(self, item: RegexProblem) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": problem_prompt(item)},
        ]

    def score_reply(self, reply: str, item: RegexProblem) -> float:
        return check_pattern(reply_pattern(reply), item, self.config.match_time_limit).score

    def eval_sample_fields(self, item: RegexProblem) -> dict[str, Any]:
        return {"description": item.description, "difficulty": item.difficulty}

    def reply_fields(self, reply: str, item: RegexProblem) -> dict[str, Any]:
        pattern = reply_pattern(reply)
        return {
            "pattern": pattern,
            "valid_regex": check_pattern(pattern, item, self.config.match_time_limit).valid,
        }

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        return {
            "eval/avg_score": mean([s["score"] for s in samples]),
            "eval/percent_perfect": mean([1.0 if s["score"] == 1.0 else 0.0 for s in samples]),
            "eval/percent_valid_regex": mean([1.0 if s["valid_regex"] else 0.0 for s in samples]),
        }


if __name__ == "__main__":
    RegexEnv.cli()
