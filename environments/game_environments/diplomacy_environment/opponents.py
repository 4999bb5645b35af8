"""Opponent powers played by a model behind any OpenAI-compatible chat endpoint."""

from __future__ import annotations

import logging

from diplomacy import Game
from openai import AsyncOpenAI

from atroposlib.envs.games import (
    ActionFormat,
    InvalidAction,
    action_instructions,
    action_tool_schema,
    parse_action,
)

try:
    from environments.game_environments.diplomacy_environment.diplomacy_game import render_board, split_orders
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from diplomacy_game import render_board, split_orders

logger = logging.getLogger(__name__)


class ModelOpponents:
    """Asks a chat model for one power's orders, shown the board as the trained model sees it.

    Each phase is a fresh chat (rules, then the board). A reply without one readable move, or a failed
    request, gives no orders: that power's units hold.
    """

    def __init__(
        self,
        base_url: str,
        model_name: str,
        api_key: str,
        temperature: float,
        action_format: ActionFormat,
        rules: str,
        max_tokens: int = 1024,
    ) -> None:
        self.client = AsyncOpenAI(base_url=base_url, api_key=api_key)
        self.model_name = model_name
        self.temperature = temperature
        self.action_format = action_format
        self.rules = rules
        self.max_tokens = max_tokens
        self.schema = action_tool_schema("orders", "all of your orders this phase, separated by ';'")

    def messages(self, game: Game, power: str) -> list[dict[str, str]]:
        """The chat that asks ``power`` for its orders."""
        how = action_instructions(self.action_format, "orders", "A PAR H", self.schema)
        return [
            {"role": "system", "content": f"{self.rules.format(power=power)}\n\n{how}"},
            {"role": "user", "content": render_board(game, power)},
        ]

    async def orders(self, game: Game, power: str) -> list[str]:
        """The orders the model gives ``power`` now (empty when it gives none readable)."""
        try:
            completion = await self.client.chat.completions.create(
                model=self.model_name,
                messages=self.messages(game, power),
                temperature=self.temperature,
                max_tokens=self.max_tokens,
            )
            reply = completion.choices[0].message.content or ""
            return split_orders(parse_action(reply, self.action_format, "orders"))
        except InvalidAction as exc:
            logger.info("opponent %s gave no readable orders (%s); its units hold", power, exc)
        except Exception as exc:  # the opponent's server failing must not stop the training game
            logger.warning("opponent %s: request failed (%s); its units hold", power, exc)
        return []
