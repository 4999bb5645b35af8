"""Taxi on Gymnasium: drive to the passenger, pick them up, drop them off at their destination.

One chat turn per move. The model sees the 5x5 map as text (``T`` marks the taxi, ``R G Y B`` the four
stands, ``|`` a wall, ``:`` an open border) and where the taxi, the passenger and the destination are.
Moves (see :mod:`atroposlib.envs.games` for the two action formats, ``tool_call`` by default):
``south``, ``north``, ``east``, ``west``, ``pickup``, ``dropoff``.

Reward: the game's own: -1 per move, +20 for delivering the passenger (which ends the game), -10 for a
pickup or drop-off where there is none to make. A reply without one valid move scores
``invalid_action_penalty`` (default -10) and ends the episode; ``max_turns`` (default 25; an optimal
game needs at most about 16 moves) bounds it. The score is the episode's return ``sum_t gamma**t * r_t``
(``--env.gamma``, default 1: undiscounted). Evaluation plays ``eval_episodes`` held-out games and
reports the delivery rate (``eval/percent_correct``, ``eval/won``) and the mean return.

Gymnasium versions: the environment id is ``--env.env_id`` when given, else ``Taxi-v3`` where it is
registered (Gymnasium < 1.4) and otherwise the newest registered ``Taxi-vN`` (1.4 retired ``Taxi-v3``
for ``Taxi-v4``).

``serve`` needs a token-level inference server (``--openai.server_type vllm`` or ``sglang``, the default);
``process`` and ``evaluate`` also play against any chat endpoint (``--openai.server_type openai``).

``python environments/game_environments/taxi_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Optional

import gymnasium as gym
from pydantic import Field

from atroposlib.envs.games import GameEnv, GameEnvConfig, GameSession, InvalidAction, action_tool_schema

MOVES = {"south": 0, "north": 1, "east": 2, "west": 3, "pickup": 4, "dropoff": 5}
STANDS = [("R", "Red"), ("G", "Green"), ("Y", "Yellow"), ("B", "Blue")]
_TAXI_ID = re.compile(r"^Taxi-v(\d+)$")

RULES = (
    "You drive a taxi on a 5x5 grid. Pick up the passenger at their stand and drop them off at their "
    "destination stand. Rows are numbered 0-4 from the top (north), columns 0-4 from the left (west). "
    "'|' on the map is a wall you cannot cross; ':' is an open border. Moves: south, north, east, west "
    "(one square; driving into a wall wastes the move), pickup, dropoff. Every move costs 1 point, a "
    "delivery earns 20 and ends the game, a pickup or drop-off with no passenger to pick up or drop there "
    "costs 10. You may think inside <think> </think> tags before your move."
)


def taxi_env_id(registered: Optional[Iterable[str]] = None) -> str:
    """``Taxi-v3`` when registered, else the highest registered ``Taxi-vN``.

    ``registered`` defaults to Gymnasium's registry. Raises RuntimeError when no Taxi id exists.
    """
    ids = list(gym.envs.registry.keys() if registered is None else registered)
    if "Taxi-v3" in ids:
        return "Taxi-v3"
    versions = sorted((int(m.group(1)), name) for name in ids if (m := _TAXI_ID.match(name)))
    if not versions:
        raise RuntimeError(f"gymnasium {gym.__version__} registers no Taxi environment")
    return versions[-1][1]


def render_map(desc: Any, taxi_row: int, taxi_col: int) -> str:
    """The text map with ``T`` at the taxi's square."""
    lines = ["".join(c.decode() if isinstance(c, bytes) else str(c) for c in row) for row in desc]
    row = list(lines[taxi_row + 1])
    row[2 * taxi_col + 1] = "T"
    lines[taxi_row + 1] = "".join(row)
    return "\n".join(lines)


def describe_state(desc: Any, locs: list[tuple[int, int]], state: tuple[int, int, int, int]) -> str:
    """The observation text of a decoded Taxi state ``(taxi_row, taxi_col, passenger, destination)``."""
    taxi_row, taxi_col, passenger, destination = state

    def stand(index: int) -> str:
        letter, colour = STANDS[index]
        row, col = locs[index]
        return f"{colour} ({letter}, row {row}, column {col})"

    where = "in the taxi" if passenger == 4 else f"waiting at {stand(passenger)}"
    return (
        f"{render_map(desc, taxi_row, taxi_col)}\n"
        f"The taxi is at row {taxi_row}, column {taxi_col}. The passenger is {where}. "
        f"Destination: {stand(destination)}.\nYour move?"
    )


class TaxiEnvConfig(GameEnvConfig):
    """GameEnvConfig plus the Taxi variant."""

    group_size: int = 32
    max_turns: int = Field(25, ge=1, description="moves per game at most")
    max_tokens_per_turn: int = Field(512, ge=1, description="generation budget of one reply in tokens")
    max_token_length: int = Field(16384, description="budget of a whole episode's sequence in tokens")
    invalid_action_penalty: float = Field(
        -10.0, description="reward of a reply without one valid move; the episode ends there"
    )
    env_id: Optional[str] = Field(
        None, description="Gymnasium id (default: Taxi-v3 where registered, else the newest Taxi-vN)"
    )
    is_rainy: bool = Field(False, description="moves may slip sideways (Gymnasium >= 1.0)")
    fickle_passenger: bool = Field(
        False, description="the passenger may change destination (Gymnasium >= 1.0)"
    )


class TaxiSession(GameSession):
    """One game of Taxi."""

    def __init__(self, config: TaxiEnvConfig, env_id: str, seed: int):
        super().__init__(config.action_format, config.invalid_action_penalty)
        options = {k: True for k in ("is_rainy", "fickle_passenger") if getattr(config, k)}
        self.env = gym.make(env_id, **options)
        observation, _ = self.env.reset(seed=seed)
        self.picked_up = False
        self.open(
            RULES,
            action_tool_schema("action", "your move", list(MOVES)),
            "north",
            self._describe(observation),
        )

    def _describe(self, observation: int) -> str:
        game = self.env.unwrapped
        return describe_state(
            game.desc, list(game.locs), tuple(int(v) for v in game.decode(int(observation)))
        )

    def parse_move(self, text: str) -> int:
        move = MOVES.get(text.lower().replace("-", "").replace(" ", ""))
        if move is None:
            raise InvalidAction(f"{text!r} is not a move: use one of {', '.join(MOVES)}")
        return move

    async def apply(self, move: int) -> tuple[float, bool, str]:
        observation, reward, terminated, truncated, _ = self.env.step(move)
        passenger = list(self.env.unwrapped.decode(int(observation)))[2]
        self.picked_up = self.picked_up or passenger == 4
        if terminated:
            self.won = True
            return float(reward), True, f"Passenger delivered. Reward: {reward:+g}."
        text = f"Reward: {reward:+g}.\n{self._describe(observation)}"
        return float(reward), bool(truncated), text

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), "picked_up": float(self.picked_up)}


class TaxiEnv(GameEnv):
    """Taxi, one move per turn (see the module docstring)."""

    name = "gym_taxi"
    env_config_cls = TaxiEnvConfig
    config: TaxiEnvConfig

    def __init__(self, config: TaxiEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.gym_env_id = config.env_id or taxi_env_id()
        if self.gym_env_id not in gym.envs.registry:
            taxis = sorted(k for k in gym.envs.registry if k.startswith("Taxi"))
            raise ValueError(
                f"env_id {self.gym_env_id!r} is not registered; Taxi ids here: {', '.join(taxis)}"
            )

    async def make_session(self, seed: int) -> TaxiSession:
        return TaxiSession(self.config, self.gym_env_id, seed)


# The original's class name, for code that imports it.
GymTaxiEnv = TaxiEnv


if __name__ == "__main__":
    TaxiEnv.cli()
