"""UFC fight predictions as broadcast-style commentary, from the two fighters' statistics.

Each prompt shows a fight's red and blue corners with their statistics cards (record, age, size, stance,
striking and grappling rates) and asks for dramatic live-style commentary ending with the winner's name in
``\\boxed{}``. Reward: +1 when the reply predicts the fight's winner, -1 otherwise (the wrong fighter, no
prediction, a hedge, a prediction only inside ``<think>``, text after the prediction or almost no commentary;
``prediction.py`` says exactly how a reply is read).

Data: the two CSV files the original ships in its folder (``large_dataset.csv``: its 799-fight sample, one
fight per row with ``r_fighter``, ``b_fighter``, ``winner``; ``fighter_stats.csv``: one fighter per row by
``name`` with ``wins``, ``losses``, ``age``, ``height``, ``weight``, ``reach``, ``stance``, ``SLpM``,
``sig_str_acc``, ``SApM``, ``str_def``, ``td_avg``, ``td_acc``, ``td_def``, ``sub_avg``): read from next to
this file when there, else downloaded once from the original's repository (``fight_data.original_file``).
``--env.dataset_path`` (the original's ``fight_data_path``) and ``--env.fighter_stats_path`` read local files
in the same schema (e.g. the full 7,440-fight set); ``--env.eval_dataset_path`` gives evaluation fights, else
a seeded ``eval_fraction`` of the fights is held out.

``python environments/community/ufc_prediction_env/ufc_server.py {serve,process,evaluate}``
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Optional

from pydantic import Field

# Run as a script, the repository root is not on the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from atroposlib.envs.declared_defaults import DeclaredDefaults  # noqa: E402
from atroposlib.envs.reply_fields import ReplyFields  # noqa: E402
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig  # noqa: E402
from environments.community._judging.train_shares import TrainShares  # noqa: E402
from environments.community.ufc_prediction_env.fight_data import (  # noqa: E402
    Fight,
    load_fighter_stats,
    load_fights,
    original_file,
)
from environments.community.ufc_prediction_env.prediction import predicted_corner  # noqa: E402

HERE = Path(__file__).resolve().parent
SYSTEM_PROMPT = (
    "You are an expert MMA analyst. You will be given two UFC fighters and their stats. Your task is to "
    "predict the winner of the fight based on their statistics. You may think first inside <think> </think> "
    "tags; only what follows counts.\n\n"
    "IMPORTANT: You MUST format your response in exactly two parts:\n"
    "1. First, analyze the fighters' stats and create a fight commentary\n"
    "2. Then on a new line, give ONLY your final prediction in this exact format:\n"
    "\\boxed{fighter name}\n\n"
    "For example:\n"
    "After analyzing stats... [your analysis here]\n"
    "\\boxed{John Smith}\n\n"
    "If you do not end your response with the \\boxed{} format, you will receive a score of -1.0."
)
USER_PROMPT = (
    "🎤 LADIES AND GENTLEMEN! Welcome to the most electrifying show in sports entertainment - the UFC Fight "
    "Prediction Show! Let's break down this matchup that's got everyone talking!\n\n"
    "*Drumroll please* In the red corner, we have:\n{red}\n\n"
    "And in the blue corner:\n{blue}\n\n"
    "Now, as your favorite fight analyst, I want you to:\n"
    "1. Break down these fighters like you're explaining why your favorite TV show character would win in a "
    "fight\n"
    "2. Compare their styles\n"
    "3. Point out their advantages\n"
    "Give us your best fight commentary! Make it exciting, make it dramatic, make it sound like you're calling "
    "the fight live! Throw in some classic commentator phrases, maybe a 'OH MY GOODNESS!' or two, and "
    "definitely some dramatic pauses for effect.\n\n"
    "End your masterpiece with the winner's name in this exact format:\n"
    "\\boxed{{fighter name}}"
)


class UFCEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the fight and fighter files and the commentary requirement."""

    original_key_aliases: ClassVar[dict[str, str]] = {"fight_data_path": "dataset_path"}
    ignored_original_keys: ClassVar[dict[str, str]] = {
        "max_steps": "one reply per fight: every prediction is a single step",
    }
    dataset_path: Optional[str] = Field(
        None,
        description="fights: r_fighter, b_fighter, winner (Red/Blue) (default: the original's large_dataset.csv)",
    )
    fighter_stats_path: Optional[str] = Field(
        None, description="fighter statistics by name (default: the original's fighter_stats.csv)"
    )
    eval_dataset_path: Optional[str] = Field(
        None, description="evaluation fights (default: eval_fraction of the fights held out)"
    )
    eval_fraction: float = Field(
        0.05, gt=0.0, lt=1.0, description="share of the fights held out for evaluation"
    )
    split_seed: int = Field(42, description="seed of the held-out split")
    min_commentary_words: int = Field(
        10, ge=0, description="words of commentary a reply needs before its prediction to count"
    )


class UFCEnv(TrainShares, ReplyFields, DeclaredDefaults, SingleTurnEnv):
    """Rewards commentary whose boxed prediction names the fight's winner; logs ``train/format_rate`` (the
    share of replies with a readable prediction)."""

    name = "ufc_predictor"
    env_config_cls = UFCEnvConfig
    config: UFCEnvConfig
    default_env_values = dict(
        group_size=8, temperature=0.7, top_p=0.95, max_tokens=2048, max_token_length=4096
    )

    async def setup(self) -> None:
        cfg = self.config
        stats = load_fighter_stats(cfg.fighter_stats_path or original_file("fighter_stats.csv", HERE))
        fights = load_fights(cfg.dataset_path or original_file("large_dataset.csv", HERE), stats)
        if cfg.eval_dataset_path:
            self.train, self.test = fights, load_fights(cfg.eval_dataset_path, stats)
            return
        random.Random(cfg.split_seed).shuffle(fights)
        held_out = max(1, round(len(fights) * cfg.eval_fraction)) if len(fights) > 1 else 0
        self.test, self.train = fights[:held_out] or fights, fights[held_out:]

    def prompt_messages(self, item: Fight) -> list[dict[str, str]]:
        user = USER_PROMPT.format(red=item.red_card, blue=item.blue_card)
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def prediction(self, reply: str, item: Fight) -> Optional[str]:
        """The corner ``reply`` predicts to win ``item`` (``prediction.py``), or None."""
        return predicted_corner(reply, item.red, item.blue, self.config.min_commentary_words)

    def score_replies(self, replies: Sequence[str], item: Fight) -> list[float]:
        corners = [self.prediction(reply, item) for reply in replies]
        self.record_share("format_rate", [corner is not None for corner in corners])
        return [1.0 if corner == item.winner else -1.0 for corner in corners]

    def eval_sample_fields(self, item: Fight) -> dict[str, Any]:
        return {"red": item.red, "blue": item.blue, "winner": item.winner_name}

    def reply_fields(self, reply: str, item: Fight) -> dict[str, Any]:
        return {"predicted_corner": self.prediction(reply, item)}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """``eval/format_rate``: replies with a readable prediction; ``eval/red_pick_rate``: of those, the
        share picking the red corner (the favourite's corner, so a bias shows)."""
        picks = [s["predicted_corner"] for s in samples if s["predicted_corner"]]
        metrics = {"eval/format_rate": len(picks) / len(samples)}
        if picks:
            metrics["eval/red_pick_rate"] = picks.count("Red") / len(picks)
        return metrics


if __name__ == "__main__":
    UFCEnv.cli()
