"""Diplomacy (standard map, the ``diplomacy`` engine): the model plays one power, one chat turn per phase.

Each item is one seeded game; the ``group_size`` episodes of a group play it from the same start. The
model plays ``training_power`` (default FRANCE). Every phase in which that power has units to order
(movement, retreats, adjustments) is one turn: the model sees the phase, every power's supply centres and
units, and each of its own units' possible orders, and answers with all of its orders in one move (see
:mod:`atroposlib.envs.games` for the two action formats, ``tool_call`` by default):
``<tool_call>{"name": "take_action", "arguments": {"orders": "A PAR - BUR; A MAR - SPA; F BRE - MAO"}}</tool_call>``
or ``<action>A PAR - BUR; A MAR - SPA; F BRE - MAO</action>``. Orders are separated by ``;`` or new lines.
The engine adjudicates: an order it cannot carry out is dropped and that unit holds (the next observation
lists the rejected orders); a unit left without an order holds. A reply without one readable move (no
call, several calls, a malformed call, an empty order list, reasoning left open) scores
``invalid_action_penalty`` and ends the episode.

The other six powers are played by ``opponent_policy``: ``random`` (default: one of the engine's possible
orders per unit, drawn from a generator seeded by the game seed, the phase and the power, so the episodes
of a group meet the same opponents wherever the board is the same), ``hold`` (no orders), or ``model``
(another model through any OpenAI-compatible chat endpoint, ``opponent_base_url`` /
``opponent_model_name``, shown the same board and rules; an unreadable reply holds).

The game runs until the end of year ``1900 + max_game_turns`` (10: through 1910), a solo victory, the
model's power losing every unit, ``max_turns`` model turns or ``max_token_length`` tokens. Score (at the
end, as in the original):
``(supply centres - starting centres) * supply_center_weight + survival_bonus * phases played
+ win_bonus`` if the model's power won, plus the invalid-reply penalty when there was one. With
``save_game_logs`` each game is saved in the engine's JSON format under ``game_logs_dir``.

``serve`` needs a token-level inference server (``--openai.server_type vllm`` or ``sglang``);
``process`` and ``evaluate`` also play against any chat endpoint.

``python environments/game_environments/diplomacy_environment/diplomacy_env_minimal.py {serve,process,evaluate}``
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import uuid
from pathlib import Path
from typing import ClassVar, Literal, Optional

from diplomacy import Game
from diplomacy.utils.export import to_saved_game_format
from pydantic import Field

from atroposlib.envs.episodes import Episode
from atroposlib.envs.games import GameEnv, GameEnvConfig, GameSession, InvalidAction, action_tool_schema

try:
    from environments.game_environments.diplomacy_environment import diplomacy_game as board
    from environments.game_environments.diplomacy_environment.opponents import ModelOpponents
except ModuleNotFoundError:  # run as a script: this folder is on the path
    import diplomacy_game as board
    from opponents import ModelOpponents

logger = logging.getLogger(__name__)

OpponentPolicy = Literal["random", "hold", "model"]
RULES = (
    "You are playing Diplomacy (standard map, no negotiation) as {power}. Each phase you give orders to all "
    "of your units at once: move (A PAR - BUR), support (A MAR S A PAR - BUR), convoy (F ENG C A LON - BRE), "
    "hold (A PAR H); in retreat phases retreat (A BUR R PIC) or disband (A BUR D); in adjustment phases "
    "build (A PAR B) or disband (F BRE D). Choose from the possible orders listed for each location. Gain "
    "supply centres, survive, and win by controlling 18. You may think inside <think> </think> tags first."
)


class DiplomacyEnvMinimalConfig(GameEnvConfig):
    """GameEnvConfig plus the game length, the model's power, the opponents and the score weights."""

    ignored_original_keys: ClassVar[dict[str, str]] = {
        "diplomacy_server_port": "the engine runs in-process; no game server is started",
        "start_diplomacy_server": "the engine runs in-process; no game server is started",
    }

    env_name: str = Field("diplomacy_minimal", description="name of the environment's runs")
    group_size: int = 4
    total_steps: int = 10
    max_token_length: int = Field(4096, description="budget of a whole game's sequence in tokens")
    max_tokens_per_turn: Optional[int] = Field(
        2000, ge=1, description="generation budget of one reply in tokens"
    )
    max_turns: int = Field(60, ge=1, description="model turns (phases with orders) per game at most")
    max_game_turns: int = Field(10, ge=1, description="game years played: the game stops after 1900 + this")
    training_power: str = Field("FRANCE", description="the power the model plays")
    opponent_policy: OpponentPolicy = Field(
        "random", description="who plays the other powers: 'random', 'hold' or 'model' (opponent_base_url)"
    )
    opponent_base_url: Optional[str] = Field(None, description="OpenAI-compatible endpoint of the opponents")
    opponent_model_name: Optional[str] = Field(None, description="model the opponents' endpoint serves")
    opponent_api_key: str = Field("x", description="API key of the opponents' endpoint")
    opponent_temperature: float = Field(0.7, ge=0.0, description="sampling temperature of the opponents")
    supply_center_weight: float = Field(1.0, description="score per supply centre gained (lost: negative)")
    survival_bonus: float = Field(0.1, description="score per game phase played")
    win_bonus: float = Field(5.0, description="score added when the model's power wins")
    save_game_logs: bool = Field(True, description="save each game in the engine's JSON format")
    game_logs_dir: str = Field("./game_logs", description="where saved games go")
    eval_episodes: int = Field(10, ge=1, description="evaluation games")


class DiplomacySession(GameSession):
    """One game, seen from the model's power (see the module docstring)."""

    argument = "orders"

    def __init__(self, config: DiplomacyEnvMinimalConfig, seed: int, opponents: Optional[ModelOpponents]):
        super().__init__(config.action_format, config.invalid_action_penalty)
        self.config = config
        self.power = config.training_power
        self.seed = seed
        self.opponents = opponents
        self.last_year = 1900 + config.max_game_turns
        self.game = Game(map_name="standard")
        self.game_id = f"diplomacy-s{seed}-{uuid.uuid4().hex[:8]}"
        self.rejected_orders = 0
        self.orders_given = 0
        self.rules = RULES.format(power=self.power)
        self.schema = action_tool_schema("orders", "all of your orders this phase, separated by ';'")

    async def start(self) -> None:
        """Play the phases before the model's first turn (none in a standard opening) and open the chat."""
        await self._advance()
        self.open(self.rules, self.schema, "A PAR - BUR; A MAR - SPA; F BRE - MAO", self._observe())

    def finished(self) -> bool:
        """The game is over for the model: solo, year limit passed, or its power eliminated."""
        year = board.phase_year(self.game.get_current_phase())
        eliminated = not self.game.get_power(self.power).units and not self.game.get_power(self.power).centers
        return self.game.is_game_done or year is None or year > self.last_year or eliminated

    def _observe(self) -> str:
        return board.render_board(self.game, self.power)

    async def _opponent_orders(self) -> None:
        others = [p for p in board.POWERS if p != self.power and board.orderable(self.game, p)]
        if self.config.opponent_policy == "random":
            phase = self.game.get_current_phase()
            for power in others:
                rng = random.Random(f"{self.seed}:{phase}:{power}")
                board.submit_orders(self.game, power, board.random_orders(self.game, power, rng))
        elif self.config.opponent_policy == "model" and self.opponents is not None:
            replies = await asyncio.gather(*(self.opponents.orders(self.game, p) for p in others))
            for power, orders in zip(others, replies, strict=True):
                board.submit_orders(self.game, power, orders)

    async def _advance(self) -> None:
        """Process phases in which the model's power has nothing to order."""
        while not self.finished() and not board.orderable(self.game, self.power):
            await self._opponent_orders()
            self.game.process()

    def parse_move(self, text: str) -> list[str]:
        orders = board.split_orders(text)
        if not orders:
            raise InvalidAction("no orders given")
        return orders

    async def apply(self, move: list[str]) -> tuple[float, bool, str]:
        rejected = board.submit_orders(self.game, self.power, move)
        self.orders_given += len(move)
        self.rejected_orders += len(rejected)
        await self._opponent_orders()
        self.game.process()
        await self._advance()
        note = f"Orders the engine rejected (those units held): {'; '.join(rejected)}\n" if rejected else ""
        summary = board.game_summary(self.game)
        if self.finished():
            self.won = summary["winner"] == self.power
            centres = summary["final_centers"][self.power]
            return (
                0.0,
                True,
                f"{note}The game is over after {summary['phases_played']} phases: you hold {centres} centres.",
            )
        return 0.0, False, note + self._observe()

    def score(self, weights: board.ScoreWeights) -> float:
        """The game's score for the model's power so far (see :func:`diplomacy_game.game_score`)."""
        summary = board.game_summary(self.game)
        return board.game_score(
            summary["final_centers"], summary["phases_played"], summary["winner"], self.power, weights
        )

    def close(self) -> None:
        if self.config.save_game_logs:
            folder = Path(self.config.game_logs_dir)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{self.game_id}.json").write_text(json.dumps(to_saved_game_format(self.game)))

    def metrics(self) -> dict[str, float]:
        summary = board.game_summary(self.game)
        return {
            **super().metrics(),
            "supply_centers": float(summary["final_centers"][self.power]),
            "phases_played": float(summary["phases_played"]),
            "rejected_order_rate": self.rejected_orders / self.orders_given if self.orders_given else 0.0,
        }


class DiplomacyEnvMinimal(GameEnv):
    """Diplomacy, one turn per phase for the model's power (see the module docstring)."""

    name = "diplomacy_minimal"
    env_config_cls = DiplomacyEnvMinimalConfig
    config: DiplomacyEnvMinimalConfig
    default_model = "NousResearch/Hermes-4-Qwen3-14B-1-e3"
    default_server_port = 9004
    correct_threshold = 0.0

    def __init__(self, config: DiplomacyEnvMinimalConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        if config.training_power.upper() not in board.POWERS:
            raise ValueError(
                f"training_power {config.training_power!r} is not one of {', '.join(board.POWERS)}"
            )
        config.training_power = config.training_power.upper()
        self.opponents: Optional[ModelOpponents] = None
        if config.opponent_policy == "model":
            if not (config.opponent_base_url and config.opponent_model_name):
                raise ValueError("opponent_policy 'model' needs opponent_base_url and opponent_model_name")
            self.opponents = ModelOpponents(
                config.opponent_base_url,
                config.opponent_model_name,
                config.opponent_api_key,
                config.opponent_temperature,
                config.action_format,
                RULES,
            )
        self.weights = board.ScoreWeights(
            config.supply_center_weight, config.survival_bonus, config.win_bonus
        )

    @classmethod
    def default_env_config(cls) -> DiplomacyEnvMinimalConfig:
        return cls.env_config_cls(tokenizer_name=cls.default_model, steps_per_eval=20)

    async def make_session(self, seed: int) -> DiplomacySession:
        session = DiplomacySession(self.config, seed, self.opponents)
        await session.start()
        return session

    def outcome_reward(self, session: DiplomacySession, episode: Episode) -> float:
        return session.score(self.weights)

    def episode_correct(self, session: DiplomacySession, episode: Episode, score: float) -> bool:
        return session.won


if __name__ == "__main__":
    DiplomacyEnvMinimal.cli()
