"""Turn-based games as multi-turn environments: one chat turn per move.

:class:`GameEnv` (a :class:`~atroposlib.envs.multi_turn.MultiTurnEnv`) plays one game per item
(``{"seed": n}``): every episode of a group plays the same seeded game, so their returns compare. A
subclass supplies :meth:`GameEnv.make_session`, a :class:`GameSession` that renders observations as
text and applies moves.

Moves: each reply makes exactly one move, after its optional ``<think>`` block, in the configured
``action_format``:

* ``tool_call`` (default): a Hermes call of the ``take_action`` tool,
  ``<tool_call>{"name": "take_action", "arguments": {"action": "hit"}}</tool_call>``;
* ``tag``: ``<action>hit</action>``.

A reply without exactly one readable move, or with a move the game does not have, is an *invalid
action*: that turn's reward is ``invalid_action_penalty`` and the episode ends there. Observations
come back as user turns. The score is the episode's return, ``sum_t gamma**t * reward_t`` over the
moves (``gamma = 1`` by default: undiscounted), invalid-action penalty included.
"""

from __future__ import annotations

import json
import re
from abc import abstractmethod
from typing import Any, Literal, Optional

from pydantic import Field

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.episodes import Episode, Feedback
from atroposlib.envs.multi_turn import MultiTurnEnv, MultiTurnEnvConfig
from atroposlib.utils.replies import answer_section
from atroposlib.utils.tool_calls import ToolCallError, extract_tool_call_blocks, parse_call_block

ActionFormat = Literal["tool_call", "tag"]
ACTION_TOOL = "take_action"
_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL)


class InvalidAction(ValueError):
    """A reply that does not make exactly one valid move; the message says why."""


def action_tool_schema(argument: str, description: str, choices: Optional[list[str]] = None) -> dict:
    """The ``take_action`` function declaration with one string ``argument`` (an enum when ``choices``)."""
    prop: dict[str, Any] = {"type": "string", "description": description}
    if choices:
        prop["enum"] = list(choices)
    return {
        "type": "function",
        "function": {
            "name": ACTION_TOOL,
            "description": "Make your move in the game.",
            "parameters": {"type": "object", "properties": {argument: prop}, "required": [argument]},
        },
    }


def action_instructions(action_format: ActionFormat, argument: str, example: str, schema: dict) -> str:
    """How to write a move, for the system prompt."""
    if action_format == "tool_call":
        call = json.dumps({"name": ACTION_TOOL, "arguments": {argument: example}})
        return (
            "Make exactly one move per reply by calling the take_action tool:\n"
            f"<tools>\n{json.dumps(schema)}\n</tools>\n"
            f"Write the call as <tool_call>{call}</tool_call> after your reasoning."
        )
    return f"Make exactly one move per reply: end your reply with <action>{example}</action>."


def parse_action(reply: str, action_format: ActionFormat, argument: str = "action") -> str:
    """The one move of ``reply`` (stripped), read after its think block.

    Raises :class:`InvalidAction` when the think block is malformed, there is no move, several moves,
    or (``tool_call``) the call is malformed, names another tool or lacks the ``argument`` string.
    """
    section = answer_section(reply)
    if section is None:
        raise InvalidAction("the <think> block is malformed")
    if action_format == "tag":
        moves = _ACTION_TAG.findall(section)
        if len(moves) != 1:
            raise InvalidAction(f"expected one <action>...</action>, found {len(moves)}")
        return moves[0].strip()
    blocks = extract_tool_call_blocks(section)
    if blocks is None:
        raise InvalidAction("<tool_call> tags do not pair up")
    if len(blocks) != 1:
        raise InvalidAction(f"expected one take_action call, found {len(blocks)}")
    try:
        call = parse_call_block(blocks[0])
    except ToolCallError as exc:
        raise InvalidAction(f"malformed tool call: {exc}") from None
    if call.name != ACTION_TOOL:
        raise InvalidAction(f"unknown tool {call.name!r}; call {ACTION_TOOL}")
    value = call.arguments.get(argument)
    if not isinstance(value, str) or not value.strip():
        raise InvalidAction(f"{ACTION_TOOL} needs a string argument {argument!r}")
    return value.strip()


class GameEnvConfig(MultiTurnEnvConfig):
    """MultiTurnEnvConfig plus how moves are written and which games are played."""

    action_format: ActionFormat = Field(
        "tool_call", description="how a reply makes its move: 'tool_call' (take_action) or 'tag' (<action>)"
    )
    invalid_action_penalty: float = Field(
        -1.0, description="reward of a reply without one valid move; the episode ends there"
    )
    seed: int = Field(0, description="seed of the first training game (game k uses seed + k)")
    eval_seed: int = Field(
        1_000_000, description="seed of the first evaluation game (held out from training seeds)"
    )
    eval_episodes: int = Field(
        50, ge=1, description="evaluation games (seeds eval_seed ... + eval_episodes - 1)"
    )


class GameSession:
    """One game being played (see the module docstring). Subclasses implement :meth:`apply` and
    :meth:`parse_move`, set :attr:`messages` (the system prompt and the first observation, usually with
    :meth:`open`) and keep :attr:`won` up to date. :meth:`close` closes :attr:`env` when it is set."""

    #: name of the move argument of take_action
    argument = "action"

    def __init__(self, action_format: ActionFormat, invalid_action_penalty: float):
        self.action_format = action_format
        self.invalid_action_penalty = float(invalid_action_penalty)
        self.messages: list[dict[str, Any]] = []
        self.won = False
        self.invalid_action: Optional[str] = None
        self.moves: list[str] = []
        #: the game's own environment object (e.g. a Gymnasium env), closed by :meth:`close`
        self.env: Any = None

    def open(self, rules: str, schema: dict, example: str, observation: str) -> None:
        """Set :attr:`messages`: a system turn of ``rules`` and the move instructions (``example``: a
        sample move; ``schema``: the take_action tool), then ``observation`` as the first user turn."""
        how = action_instructions(self.action_format, self.argument, example, schema)
        self.messages = [
            {"role": "system", "content": f"{rules}\n\n{how}"},
            {"role": "user", "content": observation},
        ]

    def close(self) -> None:
        """Close :attr:`env` (when set)."""
        if self.env is not None:
            self.env.close()

    def parse_move(self, text: str) -> Any:
        """The game's move for the move text of a reply; :class:`InvalidAction` when it has none."""
        return text

    @abstractmethod
    async def apply(self, move: Any) -> tuple[float, bool, str]:
        """Play ``move``: ``(reward, game_over, observation text)``."""

    async def step(self, reply: str, turn: int) -> Feedback:
        try:
            text = parse_action(reply, self.action_format, self.argument)
            move = self.parse_move(text)
        except InvalidAction as exc:
            self.invalid_action = str(exc)
            return Feedback(done=True, reward=self.invalid_action_penalty, info={"invalid_action": str(exc)})
        self.moves.append(text)
        reward, over, observation = await self.apply(move)
        return Feedback(
            messages=[{"role": "user", "content": observation}], done=over, reward=reward, info={"move": text}
        )

    def metrics(self) -> dict[str, float]:
        """``won`` and ``invalid_action`` (0/1) and ``moves``."""
        return {
            "won": float(self.won),
            "invalid_action": float(self.invalid_action is not None),
            "moves": float(len(self.moves)),
        }


class SeededGames:
    """Items ``{"seed": n}`` of seeded games: training game k has ``config.seed + k`` (``self.iter`` counts
    them), evaluation games ``config.eval_seed`` ... ``+ config.eval_episodes - 1``. Placed before the base
    environment class."""

    async def get_next_item(self) -> dict[str, int]:
        item = {"seed": self.config.seed + self.iter}  # type: ignore[attr-defined]
        self.iter += 1  # type: ignore[attr-defined]
        return item

    def eval_items(self) -> list[dict[str, int]]:
        config = self.config  # type: ignore[attr-defined]
        return [{"seed": config.eval_seed + k} for k in range(config.eval_episodes)]


class GameEnv(LocalServerDefaults, SeededGames, MultiTurnEnv):
    """Seeded games played as episodes (see the module docstring).

    ``config_init()``: this game's ``env_config_cls`` with batches of 1024 sequences and a wandb run named
    after the environment, and a vLLM server of :attr:`default_model` on localhost:9001.
    """

    env_config_cls = GameEnvConfig
    config: GameEnvConfig
    default_server_settings = {"server_type": "vllm"}

    @classmethod
    def default_env_config(cls) -> GameEnvConfig:
        return cls.env_config_cls(batch_size=1024)

    @abstractmethod
    async def make_session(self, seed: int) -> GameSession:
        """A fresh game for ``seed``."""

    async def setup(self) -> None:
        self.iter = 0

    async def new_session(self, item: dict[str, int], *, evaluation: bool = False) -> GameSession:
        return await self.make_session(int(item["seed"]))

    def episode_metrics(self, session: GameSession, episode: Episode) -> dict[str, float]:
        return session.metrics()

    def episode_correct(self, session: GameSession, episode: Episode, score: float) -> bool:
        return session.won

    def eval_sample_fields(self, item: Any, session: GameSession, episode: Episode) -> dict[str, Any]:
        return {"seed": item["seed"], "moves": list(session.moves), "invalid_action": session.invalid_action}
