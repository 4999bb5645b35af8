"""Word Hunt: find as many words as possible on a 4x4 letter grid, tracing adjacent letters.

Boards are generated from seeds (training boards ``boards_per_epoch`` at a time, their order shuffled per
epoch when ``shuffle_boards``; ``eval_board_count`` held-out evaluation boards), letters drawn with
``vowel_weight`` and English letter frequencies (``common_letter_bias``). The reply may reason in
``<think>...</think>``; the words are the runs of letters after it (a comma-separated list is asked for).
The generation budget is ``max_tokens_per_game`` (100 tokens, the game's time pressure) unless
``--env.max_tokens`` is given.

Reward: the points of the distinct valid words (at least ``min_word_length`` letters, in the dictionary,
traceable on the board; ``validate_words`` / ``validate_board_paths`` turn either check off) divided by the
points of every dictionary word on the board (``normalize_scores``; raw points otherwise). Points follow the
official scoring (3: 100, 4: 400, 5: 800, 6+: 1400 + 400 per extra letter) or ``2 ** (length - 2)``.
Invalid words cost nothing, as in the original. Evaluate reports ``eval/mean_score`` (normalized),
``eval/percent_correct`` (boards cleared), ``eval/avg_score`` (points per board), ``eval/total_score`` and
``eval/avg_valid_words``.

Dictionary: ``dictionary_path``, one word per line; by default the project's shipped
``environments/resources/words.txt`` (5,000 words). The original asked for a downloaded ``Dictionary.txt``;
pass it (or Debian's ``/usr/share/dict/words``) for a fuller game.

``python environments/community/word_hunt/word_hunt_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.reply_fields import ReplyFields
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import answer_section

# Run as a script (``python environments/community/word_hunt/<this file>``), the repository root is not on
# the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from environments.community.word_hunt import word_hunt_solver as solver  # noqa: E402

DEFAULT_DICTIONARY = Path(__file__).resolve().parents[2] / "resources" / "words.txt"


@dataclass(frozen=True)
class WordHuntBoard:
    """One game: the board and the seed it was generated from."""

    board: solver.Board
    seed: str


class WordHuntEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the original's board, scoring, dictionary and prompt settings."""

    board_size: int = Field(4, ge=2, le=8, description="rows and columns of the board")
    min_word_length: int = Field(3, ge=1, description="shortest word that counts")
    max_word_length: int = Field(16, ge=1, description="longest dictionary word considered")
    vowel_weight: float = Field(0.4, ge=0.0, le=1.0, description="probability that a cell is a vowel")
    common_letter_bias: bool = Field(
        True, description="draw letters by English letter frequency (else uniformly)"
    )
    max_tokens_per_game: int = Field(
        100, ge=1, description="generation budget of a reply (unless max_tokens)"
    )
    use_official_scoring: bool = Field(True, description="GamePigeon points (else 2 ** (length - 2))")
    normalize_scores: bool = Field(True, description="reward = points / the board's best (else raw points)")
    dictionary_path: Optional[str] = Field(
        None, description="one word per line (default: resources/words.txt)"
    )
    validate_words: bool = Field(True, description="words must be in the dictionary")
    validate_board_paths: bool = Field(True, description="words must be traceable on the board")
    prompt_style: Literal["grid_visual", "text_description", "both"] = Field(
        "grid_visual", description="the board as a grid, as a letter list, or both"
    )
    include_instructions: bool = Field(True, description="state the rules in the prompt")
    include_scoring_info: bool = Field(True, description="state the points in the prompt")
    boards_per_epoch: int = Field(100, ge=1, description="training boards per epoch")
    shuffle_boards: bool = Field(True, description="shuffle the boards of each epoch")
    eval_board_count: int = Field(10, ge=1, description="evaluation boards")
    seed: int = Field(0, description="seed of every board")

    @model_validator(mode="after")
    def _check_lengths(self) -> WordHuntEnvConfig:
        if self.min_word_length > self.max_word_length:
            raise ValueError(
                f"min_word_length ({self.min_word_length}) exceeds max_word_length ({self.max_word_length})"
            )
        return self


def board_prompt(board: solver.Board, cfg: WordHuntEnvConfig) -> str:
    """The user turn for ``board`` in the configured style."""
    size, parts = len(board), []
    if cfg.include_instructions:
        parts += [
            f"Find English words on this {size}x{size} letter grid to score as many points as you can; longer "
            "words are worth more.",
            f"- A word has at least {cfg.min_word_length} letters, traced through cells that touch "
            "horizontally, vertically or diagonally.",
            "- The grid does not wrap around, and a cell is used at most once in a word.",
            "- Only real English words count, each word once however many ways it can be traced.",
            "Answer with a comma-separated list, like: WORD, ANOTHER, EXAMPLE",
            "",
        ]
    if cfg.include_scoring_info:
        official = cfg.use_official_scoring
        lengths = range(cfg.min_word_length, cfg.min_word_length + 4)
        points = ", ".join(f"{n} letters: {solver.word_points(n, official)}" for n in lengths)
        parts += [f"Points: {points}, and more for longer words.", ""]
    if cfg.prompt_style in ("grid_visual", "both"):
        parts += ["Board:", *(" ".join(row) for row in board)]
    if cfg.prompt_style in ("text_description", "both"):
        parts.append("Letters: " + " ".join(letter for row in board for letter in row))
    parts += ["", "Found words:"]
    return "\n".join(parts)


class WordHuntEnv(DeclaredDefaults, ReplyFields, SingleTurnEnv):
    """Rewards the share of a board's points a list of words earns."""

    name = "word_hunt"
    env_config_cls = WordHuntEnvConfig
    config: WordHuntEnvConfig
    default_env_values = dict(group_size=16, max_token_length=1024 * 16, steps_per_eval=25)

    def __init__(self, config: WordHuntEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.dictionary: Optional[solver.Dictionary] = None

    @property
    def correct_threshold(self) -> float:  # type: ignore[override]
        return 1.0 if self.config.normalize_scores else float("inf")

    @property
    def generation_budget(self) -> int:
        return self.config.max_tokens or self.config.max_tokens_per_game

    def board(self, seed: str) -> WordHuntBoard:
        """The board generated from ``seed``."""
        cfg = self.config
        rng = random.Random(f"word-hunt:{cfg.seed}:{seed}")
        return WordHuntBoard(
            solver.generate_board(rng, cfg.board_size, cfg.vowel_weight, cfg.common_letter_bias), seed
        )

    async def setup(self) -> None:
        cfg = self.config
        path = cfg.dictionary_path or DEFAULT_DICTIONARY
        self.dictionary = solver.Dictionary.load(path, cfg.min_word_length, cfg.max_word_length)
        self.test = [self.board(f"eval:{i}") for i in range(cfg.eval_board_count)]

    async def get_next_item(self) -> WordHuntBoard:
        cfg = self.config
        epoch, index = divmod(self.iter, cfg.boards_per_epoch)
        self.iter += 1
        order = list(range(cfg.boards_per_epoch))
        if cfg.shuffle_boards:
            random.Random(f"word-hunt-order:{cfg.seed}:{epoch}").shuffle(order)
        return self.board(f"train:{epoch * cfg.boards_per_epoch + order[index]}")

    def prompt_messages(self, item: WordHuntBoard) -> list[dict[str, str]]:
        return [{"role": "user", "content": board_prompt(item.board, self.config)}]

    def result(self, reply: str, item: WordHuntBoard) -> solver.HuntResult:
        """How a reply does on its board (no words when its reasoning is malformed)."""
        section = answer_section(reply)
        cfg = self.config
        return solver.score_words(
            solver.reply_words(section or ""),
            item.board,
            self.dictionary,
            official=cfg.use_official_scoring,
            validate_words=cfg.validate_words,
            validate_paths=cfg.validate_board_paths,
            min_length=cfg.min_word_length,
        )

    def score_reply(self, reply: str, item: WordHuntBoard) -> float:
        result = self.result(reply, item)
        return result.normalized if self.config.normalize_scores else float(result.points)

    def eval_sample_fields(self, item: WordHuntBoard) -> dict[str, Any]:
        return {"board": [" ".join(row) for row in item.board], "seed": item.seed}

    def reply_fields(self, reply: str, item: WordHuntBoard) -> dict[str, Any]:
        result = self.result(reply, item)
        return {"points": result.points, "best": result.best, "valid_words": list(result.valid)}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        return {
            "eval/avg_score": mean([s["points"] for s in samples]),
            "eval/total_score": float(sum(s["points"] for s in samples)),
            "eval/avg_valid_words": mean([len(s["valid_words"]) for s in samples]),
        }


if __name__ == "__main__":
    WordHuntEnv.cli()
