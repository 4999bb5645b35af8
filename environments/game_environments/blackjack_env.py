"""Blackjack on Gymnasium (``Blackjack-v1``): one chat turn per move, hit or stick.

Each item is one seeded hand; the ``group_size`` episodes of a group play the same hand, so their
returns compare. The model sees its cards, their total (and whether an ace counts as 11) and the
dealer's face-up card, and answers each turn with one move (see :mod:`atroposlib.envs.games`):

* default ``--env.action_format tool_call``:
  ``<tool_call>{"name": "take_action", "arguments": {"action": "hit"}}</tool_call>``;
* ``--env.action_format tag``: ``<action>hit</action>``.

Moves are ``hit`` or ``stick``. Reward: the game's own, +1 for a win, -1 for a loss, 0 for a draw
(+1.5 for a natural blackjack with ``--env.natural true --env.sab false``), given when the hand ends.
A reply without one valid move scores ``invalid_action_penalty`` (default -1) and ends the episode;
``max_turns`` (default 10) bounds the episode. The score is the episode's return,
``sum_t gamma**t * r_t`` (``--env.gamma``, default 1: undiscounted). Evaluation plays
``eval_episodes`` held-out hands and reports the win rate (``eval/percent_correct``, ``eval/won``),
the mean return and the share of invalid moves.

``serve`` needs a token-level inference server (``--openai.server_type vllm`` or ``sglang``, the default):
episodes are tracked with ManagedServer, the model's replies trained and the observations masked.
``process`` and ``evaluate`` also play against any chat endpoint (``--openai.server_type openai``, a
hosted model), the tokens then computed from the messages.

``python environments/game_environments/blackjack_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import gymnasium as gym
from pydantic import Field

from atroposlib.envs.games import GameEnv, GameEnvConfig, GameSession, InvalidAction, action_tool_schema

MOVES = {"stick": 0, "hit": 1}

RULES = (
    "You are playing blackjack against a dealer. Cards 2-10 count their value, jack, queen and king count "
    "10, an ace counts 1 or 11 (11 when that does not take you over 21). You want a total closer to 21 than "
    "the dealer's without going over. Each turn choose one move: 'hit' takes another card (over 21 and you "
    "lose at once); 'stick' ends your turn, then the dealer draws until reaching 17 or more. A win scores "
    "+1, a loss -1, a draw 0. You may think inside <think> </think> tags before your move."
)


def card_name(card: int) -> str:
    """``1`` -> ``"ace"``, other cards by value (tens include the face cards)."""
    return "ace" if card == 1 else str(card)


def describe_hand(player: list[int], dealer_up: int, total: int, usable_ace: bool) -> str:
    """The observation text of a blackjack position."""
    cards = ", ".join(card_name(c) for c in player)
    ace = " (an ace counts as 11)" if usable_ace else ""
    return (
        f"Your cards: {cards}. Your total: {total}{ace}. The dealer shows: {card_name(dealer_up)}.\n"
        "Your move: hit or stick?"
    )


class BlackjackEnvConfig(GameEnvConfig):
    """GameEnvConfig plus the Gymnasium environment id and its blackjack rule switches."""

    #: compat: the name 0.4.0's blackjack_env_no_thinking.py gave the turn limit.
    original_key_aliases = {"max_episode_turns": "max_turns"}

    group_size: int = 16
    env_name: str = Field("Blackjack-v1", description="the Gymnasium environment id (a Blackjack-v1 variant)")
    max_turns: int = Field(10, ge=1, description="moves per hand at most (a hand rarely needs more than 5)")
    max_tokens_per_turn: int = Field(1024, ge=1, description="generation budget of one reply in tokens")
    max_token_length: int = Field(8192, description="budget of a whole episode's sequence in tokens")
    natural: bool = Field(False, description="a natural blackjack pays 1.5 (only with sab false)")
    sab: bool = Field(True, description="Sutton & Barto rules (a natural draws against a dealer natural)")


class BlackjackSession(GameSession):
    """One hand of ``Blackjack-v1``."""

    def __init__(self, config: BlackjackEnvConfig, seed: int):
        super().__init__(config.action_format, config.invalid_action_penalty)
        self.env = gym.make(config.env_name, natural=config.natural, sab=config.sab)
        observation, _ = self.env.reset(seed=seed)
        self.open(
            RULES, action_tool_schema("action", "your move", list(MOVES)), "hit", self._describe(observation)
        )

    def _describe(self, observation) -> str:
        total, dealer_up, usable_ace = (int(v) for v in observation)
        return describe_hand(list(self.env.unwrapped.player), dealer_up, total, bool(usable_ace))

    def parse_move(self, text: str) -> int:
        move = MOVES.get(text.lower())
        if move is None:
            raise InvalidAction(f"{text!r} is not a move: use hit or stick")
        return move

    async def apply(self, move: int) -> tuple[float, bool, str]:
        observation, reward, terminated, truncated, _ = self.env.step(move)
        over = bool(terminated or truncated)
        if over:
            self.won = reward > 0
            dealer = ", ".join(card_name(c) for c in self.env.unwrapped.dealer)
            return float(reward), True, f"The hand is over (dealer's cards: {dealer}). Reward: {reward:+g}."
        return float(reward), False, self._describe(observation)


class BlackjackEnv(GameEnv):
    """Blackjack, one move per turn (see the module docstring)."""

    name = "blackjack"
    env_config_cls = BlackjackEnvConfig

    async def make_session(self, seed: int) -> BlackjackSession:
        return BlackjackSession(self.config, seed)


if __name__ == "__main__":
    BlackjackEnv.cli()
