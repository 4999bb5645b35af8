"""Solitaire winning probability: read a small game of chance (described and written as Python) and give the
exact probability of winning as a formula.

The reply may reason (in ``<think>...</think>`` or the original's ``<reasoning>`` section); the answer is the
one ``<formula>...</formula>`` after the reasoning or, without one, the one ``\\boxed{...}``. A formula may use
numbers, ``+ - * / ^``, parentheses, ``factorial(n)``, ``C(n, r)``, ``P(n, r)`` and ``\\frac{a}{b}``; it is
evaluated exactly by a syntax-tree evaluator (``formula.py``), never executed.

Reward, as the original computed it: with ``e`` the relative error against the gold probability,
``clamp(1 + closeness_bonus - min(e, 2), -1, 1)``, so answers within ``closeness_bonus`` (0.2) of the truth
score 1.0 and the score falls with the error; -1.0 for no answer, several different answers or a formula that
does not evaluate. (The original then replaced every non-zero reward by 1.0, which lost the grading; here the
graded reward is kept.) Evaluate counts a reply as correct when its value is exact (``eval/percent_exact``)
and reports ``eval/percent_correct`` (score 1.0) and ``eval/mean_score``.

Data: 12 games written for this project with exact probabilities by enumeration (``solitaire_games.jsonl``),
10 for training and 2 held out. ``--env.dataset_path`` / ``--env.eval_dataset_path`` read rows in the
original's ``qa_data.csv`` schema: ``question`` and ``answer`` (a number or a formula such as ``1/4``).

``python environments/community/solitaire_winning_probability/solitaire_server.py {serve,process,evaluate}``
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.data_loading import DatasetError, check_rows, read_local_rows
from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.reply_fields import ReplyFields
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import answer_section, boxed_answers

try:
    from environments.community.solitaire_winning_probability.formula import evaluate_formula
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from formula import evaluate_formula

GAMES = Path(__file__).resolve().parent / "solitaire_games.jsonl"
SYSTEM_PROMPT = (
    "You may think before answering: put your reasoning inside <think> </think> tags.\n\n"
    "You are given a game of chance. Work out the exact probability of winning it. After your reasoning, "
    "write only the final formula inside <formula> </formula> tags, using numbers, + - * / ^, parentheses, "
    "factorial(n), C(n,r) for combinations and P(n,r) for permutations, for example "
    "<formula>C(4,2)/C(8,2)</formula>."
)
_FORMULA = re.compile(r"<formula>(.*?)</formula>", re.DOTALL)


@dataclass(frozen=True)
class Game:
    """A question and its gold probability."""

    question: str
    probability: Fraction


def games_from_rows(rows: list[dict[str, Any]], source: str) -> list[Game]:
    """Games of rows with ``question`` and ``answer``; :class:`DatasetError` naming the row when an answer is
    not a probability."""
    check_rows(rows, ["question", "answer"], source)
    games = []
    for index, row in enumerate(rows):
        value = evaluate_formula(str(row["answer"]))
        if value is None or not 0 < value <= 1:
            raise DatasetError(
                f"{source}: row {index}: field 'answer' is not a probability in (0, 1]: {row['answer']!r}"
            )
        games.append(Game(str(row["question"]).strip(), value))
    return games


def reply_value(reply: str) -> Optional[Fraction]:
    """The value a reply gives: its one ``<formula>`` after the reasoning, else its one boxed answer."""
    section = answer_section(reply)
    if section is None:
        return None
    if "<reasoning>" in section:
        section = section.split("</reasoning>", 1)[-1] if "</reasoning>" in section else ""
    answers = [a.strip() for a in _FORMULA.findall(section)] or boxed_answers(section)
    values = {evaluate_formula(a) for a in answers if a.strip()}
    if len(values) != 1:
        return None
    return values.pop()


def closeness(value: Optional[Fraction], gold: Fraction, bonus: float = 0.2) -> float:
    """The original's graded reward (see the module docstring); -1.0 without a value."""
    if value is None:
        return -1.0
    error = float(abs(value - gold) / gold)
    return round(max(-1.0, min(1.0, 1.0 + bonus - min(error, 2.0))), 6)


class SolitaireEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the data source and the reward's tolerance."""

    dataset_path: Optional[str] = Field(
        None, description="local games (question, answer); default: the shipped games"
    )
    eval_dataset_path: Optional[str] = Field(None, description="local evaluation games (default: 2 held out)")
    eval_size: int = Field(
        2, ge=1, description="games held out for evaluation when no evaluation file is given"
    )
    closeness_bonus: float = Field(0.2, ge=0.0, description="relative error still rewarded 1.0")
    shuffle_seed: int = Field(42, description="seed of the shuffle before the split")


class SolitaireEnv(DeclaredDefaults, ReplyFields, SingleTurnEnv):
    """Rewards probability formulas by their closeness to the exact winning probability."""

    name = "solitaire_winning_probability"
    env_config_cls = SolitaireEnvConfig
    config: SolitaireEnvConfig
    default_env_values = dict(group_size=8, batch_size=12, steps_per_eval=100, max_token_length=2048)

    async def setup(self) -> None:
        cfg = self.config
        source = cfg.dataset_path or GAMES
        games = games_from_rows(read_local_rows(source), str(source))
        random.Random(cfg.shuffle_seed).shuffle(games)
        if cfg.eval_dataset_path:
            self.train = games
            self.test = games_from_rows(read_local_rows(cfg.eval_dataset_path), cfg.eval_dataset_path)
            return
        held_out = min(cfg.eval_size, len(games) // 2)
        self.test, self.train = games[:held_out] or games, games[held_out:]

    def prompt_messages(self, item: Game) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": item.question}]

    def score_reply(self, reply: str, item: Game) -> float:
        return closeness(reply_value(reply), item.probability, self.config.closeness_bonus)

    def eval_sample_fields(self, item: Game) -> dict[str, Any]:
        return {"gold_probability": str(item.probability)}

    def reply_fields(self, reply: str, item: Game) -> dict[str, Any]:
        value = reply_value(reply)
        return {"value": None if value is None else str(value), "exact": value == item.probability}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        return {"eval/percent_exact": mean([1.0 if s["exact"] else 0.0 for s in samples])}


if __name__ == "__main__":
    SolitaireEnv.cli()
