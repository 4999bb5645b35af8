"""DeepSacrifice: play the move of a chess position, rewarded for sound sacrificial attacking play.

Each item is a position (a FEN, with the moves that led to it); the policy plays the side to move as an
aggressive attacking player and answers with one move in ``<move>...</move>`` (SAN such as ``Nxf7`` or UCI
such as ``g5f7``) after an optional ``<think>...</think>`` block. The ``chess`` package checks the move and
measures what it gives up (``sacrifice.py``: the material the opponent wins by exchange, net of what the move
captured; ``min_sacrifice`` pawns or more makes it a sacrifice).

Reward, as the original scored an agent's moves: a judge rates the move's aggression / brilliance from 1 to 10
and says whether a sacrifice is justified, answering with one JSON object ``{"score": 7, "sound": true,
"justification": "..."}``. The judge sees the position, the moves so far and the move played, never the
reply, so nothing the policy writes can talk to it. Reward ``score / 10``, plus ``sacrifice_weight`` (0.5) for
a sacrifice the judge calls sound, minus it for one it calls unsound; a mating move scores ``1 +
sacrifice_weight`` without the judge; -1.0 without the judge for no move, an illegal or unreadable one,
different moves (a hedge) or a move only inside the reasoning. A verdict that is not one such object with a
whole score in 1-10 and a true/false ``sound`` is a judge failure: the reply gets its group's mean (no
advantage either way), counted in ``train/judge_failures``; evaluation leaves it out of the means
(``eval/unscored``). A reply counts as correct at ``score_threshold`` (1.0: a sound sacrifice rated 5 or
more, or mate). Logs ``train/legal_rate``, ``train/sacrifice_rate``; evaluation adds ``eval/legal_rate``,
``eval/sacrifice_rate``, ``eval/sound_sacrifice_rate``.

The judge: ``--judge.base_url`` / ``--judge.model_name`` (any OpenAI-compatible server) or the ``judge_*``
settings, else the policy's own servers (``_judging/policy_judge.py``).

Data: the 16 attacking positions of ``positions.jsonl`` (gambits and classic sacrificial patterns, both
colours to move), split 80/20 by a seeded shuffle. ``--env.dataset_path`` / ``--env.eval_dataset_path`` read
local positions: ``fen``, optional ``moves`` (the SAN moves that led to it, shown to the policy and the judge)
and ``name``.

``python environments/community/deepsacrifice_chess/chess_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

# Run as a script, the repository root is not on the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from atroposlib.envs.config_defaults import LocalServerDefaults  # noqa: E402
from atroposlib.envs.data_loading import read_local_rows  # noqa: E402
from atroposlib.envs.reporting import mean  # noqa: E402
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig  # noqa: E402
from atroposlib.evals.judge import Judgement  # noqa: E402
from atroposlib.utils.replies import answer_section  # noqa: E402
from environments.community._judging import policy_judge as judging  # noqa: E402
from environments.community.deepsacrifice_chess import positions as chess_positions  # noqa: E402
from environments.community.deepsacrifice_chess.positions import ChessPosition, play  # noqa: E402
from environments.community.deepsacrifice_chess.sacrifice import MoveAnalysis  # noqa: E402

POSITIONS = Path(__file__).resolve().parent / "positions.jsonl"
INVALID = -1.0
#: the training settings ``config_init`` starts from
TRAINING_DEFAULTS: dict[str, Any] = {"group_size": 8, "batch_size": 64, "max_token_length": 2048}


class ChessEnvConfig(judging.PolicyJudgeSettings, SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the data, the judge and the sacrifice scoring."""

    dataset_path: Optional[str] = Field(None, description="local positions (default: the shipped 16)")
    eval_dataset_path: Optional[str] = Field(
        None, description="local evaluation positions (default: 20% held out)"
    )
    split_seed: int = Field(42, description="seed of the 80/20 split")
    min_sacrifice: int = Field(1, ge=1, description="pawns of material a move must offer to be a sacrifice")
    sacrifice_weight: float = Field(
        0.5, ge=0.0, description="added for a sound sacrifice, taken off for an unsound one"
    )
    score_threshold: float = Field(1.0, description="reward at which an evaluation reply counts as correct")
    judge_model_name: str = Field("gpt-4o-mini", description="model name sent to the judge server")
    judge_max_tokens: int = Field(512, ge=0, description="token budget of one judgement (0: the server's)")


class ChessEnv(judging.PolicyJudgeMixin, LocalServerDefaults, judging.JudgedGrades, SingleTurnEnv):
    """Chess moves scored by the judge's aggression rating and sacrifice verdict (see the module docstring)."""

    name = "deepsacrifice_chess"
    env_config_cls = ChessEnvConfig
    config: ChessEnvConfig

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.move_counts = {"replies": 0, "legal": 0, "sacrifices": 0}

    @classmethod
    def default_env_config(cls) -> ChessEnvConfig:
        return ChessEnvConfig(tokenizer_name=cls.default_model, **TRAINING_DEFAULTS)

    @property
    def correct_threshold(self) -> float:  # type: ignore[override]
        return self.config.score_threshold

    async def setup(self) -> None:
        cfg = self.config
        source = cfg.dataset_path or POSITIONS
        positions = chess_positions.positions_from_rows(read_local_rows(source), str(source))
        if cfg.eval_dataset_path:
            path = cfg.eval_dataset_path
            self.train, self.test = (
                positions,
                chess_positions.positions_from_rows(read_local_rows(path), path),
            )
            return
        self.train, self.test = chess_positions.split_positions(positions, cfg.split_seed)

    def prompt_messages(self, item: ChessPosition) -> list[dict[str, str]]:
        return chess_positions.policy_messages(item)

    # -- reward -----------------------------------------------------------------------------------------
    async def grade(self, reply: str, item: ChessPosition) -> Optional[Judgement[float]]:
        """The judge's reward of the reply's legal, non-mating move (None: scored without the judge)."""
        analysis = play(reply, item)
        if analysis is None or analysis.mates:
            return None
        sacrifice = analysis.is_sacrifice(self.config.min_sacrifice)
        weight = self.config.sacrifice_weight

        def reward(section: str) -> Optional[float]:
            verdict = chess_positions.parse_verdict(section)
            if verdict is None:
                return None
            score, sound = verdict
            return score / 10 + ((weight if sound else -weight) if sacrifice else 0.0)

        return await self.judge.grade(
            chess_positions.judge_messages(item, analysis, self.config.min_sacrifice), reward
        )

    def unjudged_score(self, analysis: Optional[MoveAnalysis]) -> float:
        """The reward of a move scored without the judge: mate or no legal move."""
        return 1.0 + self.config.sacrifice_weight if analysis is not None else INVALID

    async def score_replies_async(self, replies: Sequence[str], item: ChessPosition) -> list[float]:
        analyses = [play(reply, item) for reply in replies]
        grades = await asyncio.gather(*(self.grade(reply, item) for reply in replies))
        asked = [g for g in grades if g is not None]
        self.tally.add(len(asked), sum(g.failed for g in asked))
        counts = self.move_counts
        counts["replies"] += len(replies)
        counts["legal"] += sum(a is not None for a in analyses)
        counts["sacrifices"] += sum(
            a is not None and a.is_sacrifice(self.config.min_sacrifice) for a in analyses
        )
        return judging.fill_unreadable(
            [self.unjudged_score(a) if g is None else g.value for a, g in zip(analyses, grades, strict=True)]
        )

    async def eval_grade(self, reply: str, item: ChessPosition) -> judging.EvalGrade:
        analysis = play(reply, item)
        fields = self.eval_fields(reply, item)
        grade = await self.grade(reply, item)
        if grade is None:
            return judging.EvalGrade(self.unjudged_score(analysis), fields={**fields, "sound": None})
        verdict = (
            chess_positions.parse_verdict(answer_section(grade.text) or "") if fields["sacrifice"] else None
        )
        fields["sound"] = verdict[1] if verdict else None
        return judging.EvalGrade(grade.value, 1, int(grade.failed), {**fields, **grade.record()})

    def eval_fields(self, reply: str, item: ChessPosition) -> dict[str, Any]:
        analysis = play(reply, item)
        return {
            "move": analysis.san if analysis else None,
            "sacrifice": bool(analysis and analysis.is_sacrifice(self.config.min_sacrifice)),
            "offers": analysis.offers if analysis else 0,
        }

    def eval_sample_fields(self, item: ChessPosition) -> dict[str, Any]:
        return {"fen": item.fen, "name": item.name}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        sacrifices = [s for s in samples if s["sacrifice"]]
        return {
            "eval/legal_rate": mean([1.0 if s["move"] else 0.0 for s in samples]),
            "eval/sacrifice_rate": mean([1.0 if s["sacrifice"] else 0.0 for s in samples]),
            "eval/sound_sacrifice_rate": mean([1.0 if s["sound"] else 0.0 for s in sacrifices]),
        }

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        counts, metrics = self.move_counts, dict(wandb_metrics or {})
        if counts["replies"]:
            metrics["train/legal_rate"] = counts["legal"] / counts["replies"]
            metrics["train/sacrifice_rate"] = counts["sacrifices"] / counts["replies"]
        self.move_counts = {key: 0 for key in counts}
        await super().wandb_log(metrics)


if __name__ == "__main__":
    ChessEnv.cli()
