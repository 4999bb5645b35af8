"""Pokémon battles on a Pokémon Showdown server: the model plays one side, decision by decision, against a
built-in opponent; the reward is the battle's outcome.

The user runs a Showdown server (``node pokemon-showdown start --no-security``, from smogon/pokemon-showdown)
and names it with ``--env.showdown_url`` (default ``ws://localhost:8000/showdown/websocket``). Each episode
logs two guest users in, the model's user challenges the opponent's to a ``battle_format`` battle
(``gen9randombattle``: the server deals both teams) and the two play it out over the websocket protocol
(``showdown_protocol.py``, ``showdown_players.py``). The opponent is ``max_damage`` (its usable move of highest
base power, else a random choice) or ``random``.

Each decision is one chat turn: the observation (``showdown_battle.render``: field, what happened since the
last decision, the model's team with HP, moves, power, accuracy and PP, the opposing Pokémon seen and the
legal choices) comes as a user turn, masked in training. The reply, after an optional ``<think>`` block that
never counts, makes one choice through the ``take_action`` tool's ``move_id``: a move id of the active
Pokémon (``thunderbolt``) or ``switch <id>`` for a benched one. No call, several calls, or a choice that is
not legal now ends the episode with ``invalid_action_penalty`` (-1) and forfeits the battle on the server.

Reward: ``win_reward`` (1.0) for a won battle, ``loss_reward`` (0.0) for a lost or tied one, or one cut off by
``max_turns`` decisions or the context budget (``max_token_length``; the battle is forfeited). Logged:
``train/won``, ``train/finished`` (the battle reached a result), ``train/invalid_action``, ``train/moves``,
``train/battle_turns``; evaluate plays ``eval_episodes`` battles (``eval/percent_correct`` is the win rate).

``python environments/community/pokemon-showdown/pokemon_environment.py {serve,process,evaluate}
--env.showdown_url ws://HOST:8000/showdown/websocket --openai.base_url ...``
"""

from __future__ import annotations

import asyncio
import random
import sys
import uuid
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field

from atroposlib.envs.episodes import Episode, EpisodeTrackingError
from atroposlib.envs.games import GameEnv, GameEnvConfig, GameSession, InvalidAction, action_tool_schema

sys.path.insert(0, str(Path(__file__).parent))  # the folder's modules (its name is not a package name)

from showdown_battle import Choice, MoveTable, render  # noqa: E402
from showdown_players import POLICIES, BattleSide, Policy, play_out, start_battle  # noqa: E402
from showdown_protocol import ShowdownClient, ShowdownError, to_id  # noqa: E402

RULES = (
    "You are playing a Pokémon battle on Pokémon Showdown. Your goal is to win the battle. Each turn you see "
    "the state of the battle and make one choice: a move of your active Pokémon, or a switch to another of "
    "your Pokémon. Reason carefully: consider the opponent's Pokémon, the weather and side conditions, the "
    "type effectiveness, power and accuracy of your moves, and whether switching (or sacrificing a Pokémon) "
    "puts your team in a better position. You may think inside <think> </think> tags first. Write a move by "
    "its id (e.g. thunderbolt) and a switch as 'switch <id>' (e.g. switch garchomp)."
)


class PokemonEnvConfig(GameEnvConfig):
    """GameEnvConfig plus the Showdown server, the battle format, the opponent and the outcome rewards."""

    battle_format: str = Field("gen9randombattle", description="Showdown format of the battles")
    showdown_url: str = Field(
        "ws://localhost:8000/showdown/websocket", description="websocket URL of the Pokémon Showdown server"
    )
    opponent: Literal["max_damage", "random"] = Field("max_damage", description="the built-in opponent")
    win_reward: float = Field(1.0, description="reward of a won battle")
    loss_reward: float = Field(0.0, description="reward of a lost, tied or unfinished battle")
    server_timeout: float = Field(60.0, gt=0.0, description="seconds to wait for the Showdown server")
    max_turns: int = Field(100, ge=1, description="decisions per battle; an unfinished battle is forfeited")
    max_tokens_per_turn: Optional[int] = Field(1024, ge=1, description="generation budget of one decision")
    max_token_length: int = Field(32768, description="context budget of a whole battle")


class BattleSession(GameSession):
    """One battle against the built-in opponent (see the module docstring)."""

    argument = "move_id"

    def __init__(self, config: PokemonEnvConfig, table: MoveTable, agent: BattleSide, opponent: asyncio.Task):
        super().__init__(config.action_format, config.invalid_action_penalty)
        self.config, self.table, self.agent, self.opponent = config, table, agent, opponent
        self.choices: list[Choice] = []

    async def begin(self) -> None:
        """Wait for the first decision and open the chat with it."""
        choices = await self.agent.next_decision()
        if choices is None:
            raise RuntimeError("the battle ended before the first decision")
        self.choices = choices
        schema = action_tool_schema(self.argument, "a move id of your active Pokémon, or 'switch <id>'")
        self.open(RULES, schema, choices[0].name, render(self.agent.view, self.table, choices))

    @property
    def finished(self) -> bool:
        return self.agent.view.over

    def parse_move(self, text: str) -> Choice:
        words = text.lower().split()
        name = f"switch {to_id(''.join(words[1:]))}" if words[:1] == ["switch"] else to_id(text)
        for choice in self.choices:
            if choice.name == name:
                return choice
        raise InvalidAction(f"{text!r} is not a legal choice now ({', '.join(c.name for c in self.choices)})")

    async def apply(self, move: Choice) -> tuple[float, bool, str]:
        try:
            await self.agent.decide(move)
            choices = await self.agent.next_decision()
        except ShowdownError as exc:  # the server or the opponent went away: no outcome to learn from
            raise EpisodeTrackingError(f"the battle was interrupted: {exc}") from None
        if choices is None:
            self.won = (
                self.agent.view.winner is not None
                and to_id(self.agent.view.winner) == self.agent.client.user_id
            )
            reward = self.config.win_reward if self.won else self.config.loss_reward
            return reward, True, f"The battle is over: you {'won' if self.won else 'did not win'}."
        self.choices = choices
        return 0.0, False, render(self.agent.view, self.table, choices)

    async def close(self) -> None:
        """Forfeit an unfinished battle and disconnect both users."""
        await self.agent.leave()
        self.opponent.cancel()
        await asyncio.gather(self.opponent, return_exceptions=True)


class PokemonEnv(GameEnv):
    """Pokémon Showdown battles against a built-in opponent (see the module docstring)."""

    name = "pokemon_env"
    env_config_cls = PokemonEnvConfig
    config: PokemonEnvConfig

    async def setup(self) -> None:
        await super().setup()
        self.table = MoveTable()
        probe = ShowdownClient(self.config.showdown_url, _guest_name("p"), self.config.server_timeout)
        try:
            await probe.connect()
        except Exception as exc:
            raise RuntimeError(
                f"{exc} (start a server: node pokemon-showdown start --no-security; then --env.showdown_url)"
            ) from None
        finally:
            await probe.close()

    async def make_session(self, seed: int) -> BattleSession:
        config = self.config
        agent, foe = await start_battle(
            config.showdown_url,
            _guest_name("a"),
            _guest_name("o"),
            config.battle_format,
            config.server_timeout,
        )
        foe.client.timeout = None  # the opponent waits for the model's decisions, however long they take
        policy, rng = POLICIES[config.opponent], random.Random(f"showdown-opponent:{seed}")
        opponent = asyncio.create_task(_opponent(foe, policy, self.table, rng))
        session = BattleSession(config, self.table, agent, opponent)
        try:
            await session.begin()
        except BaseException:
            await session.close()
            raise
        return session

    def episode_metrics(self, session: BattleSession, episode: Episode) -> dict[str, float]:
        return {
            **session.metrics(),
            "finished": float(session.finished),
            "battle_turns": float(session.agent.view.turn),
        }


async def _opponent(side: BattleSide, policy: Policy, table: MoveTable, rng: random.Random) -> None:
    """Play the opponent's side to the end; it never forfeits (a failing opponent must not hand the model a
    win): its connection is closed and the model's side then finds the battle interrupted."""
    try:
        await play_out(side, policy, table, rng)
    finally:
        await side.client.close()


def _guest_name(role: str) -> str:
    """A fresh guest name (Showdown names have at most 18 characters)."""
    return f"atropos{role}{uuid.uuid4().hex[:10]}"


if __name__ == "__main__":
    PokemonEnv.cli()
