"""Battles between two users of one Showdown server: starting one by challenge, following it from one side
(:class:`BattleSide`) and the built-in opponents (``max_damage``: the usable move of highest base power, else a
random choice; ``random``: a uniformly random legal choice).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Optional

from showdown_battle import BattleView, Choice, MoveTable, legal_choices
from showdown_protocol import ShowdownClient, ShowdownError

Policy = Callable[[list[Choice], MoveTable, random.Random], Choice]


def max_damage_choice(choices: list[Choice], table: MoveTable, rng: random.Random) -> Choice:
    """The usable move of highest base power (the first of equals); a random choice when no move is usable."""
    moves = [choice for choice in choices if choice.is_move]
    if moves:
        return max(moves, key=lambda choice: table.base_power(choice.name))
    return rng.choice(choices)


def random_choice(choices: list[Choice], table: MoveTable, rng: random.Random) -> Choice:
    """A uniformly random legal choice (moves and switches alike)."""
    return rng.choice(choices)


POLICIES: dict[str, Policy] = {"max_damage": max_damage_choice, "random": random_choice}


class BattleSide:
    """One user's side of a battle: reads the battle room into a :class:`BattleView` and says when a
    decision is due.

    A decision is due once a request has been followed by its turn's log (``|turn|``), or, for a forced
    switch, by the log chunk after it; team previews are answered with the server's default order.
    """

    def __init__(self, client: ShowdownClient):
        self.client = client
        self.view = BattleView()
        self.room: Optional[str] = None
        self._pending: Optional[dict] = None
        self._ready = False

    async def join(self) -> None:
        """Wait for this user's battle room and read its first messages."""
        while self.room is None:
            room, lines = await self.client.receive()
            for line in lines:
                if line[0] == "popup":
                    raise ShowdownError(f"the Showdown server refused the battle: {'|'.join(line[1:])}")
            if room.startswith("battle-"):
                self.room = room
                self._read(lines)

    def _read(self, lines: list[list[str]]) -> None:
        had_request = False
        for line in lines:
            if line[0] == "request":
                had_request = self._on_request(line[1] if len(line) > 1 else "")
            elif line[0] == "turn":
                self.view.apply(line)
                self._ready = self._pending is not None
            elif line[0] == "error" and len(line) > 1 and "choice]" in line[1]:
                self._ready = self._pending is not None  # choose again from the (possibly new) request
            else:
                self.view.apply(line)
        if not had_request and self._pending is not None and any(self._pending.get("forceSwitch") or []):
            self._ready = True

    def _on_request(self, data: str) -> bool:
        if not data.strip():
            return False
        request = json.loads(data)
        self.view.set_request(request)
        self._pending = None if request.get("wait") else request
        self._ready = False
        return True

    async def next_decision(self) -> Optional[list[Choice]]:
        """Read the battle until this side must decide (its legal choices) or the battle is over (None)."""
        while True:
            if self.view.over:
                return None
            if self._ready and self._pending is not None:
                if self._pending.get("teamPreview"):
                    await self.decide(None)
                    continue
                choices = legal_choices(self._pending)
                if choices:
                    return choices
                self._pending = None  # nothing to choose: the server decides
            room, lines = await self.client.receive()
            if room == self.room:
                self._read(lines)

    async def decide(self, choice: Optional[Choice]) -> None:
        """Send ``choice`` (``None``: the server's default) for the pending request."""
        rqid = (self._pending or {}).get("rqid")
        await self.client.choose(self.room or "", choice.command if choice else "default", rqid)
        self._pending, self._ready = None, False
        self.view.events = []

    async def leave(self) -> None:
        """Forfeit an unfinished battle, then close the connection."""
        try:
            if self.room and not self.view.over:
                await self.client.send(self.room, "/forfeit")
        except ShowdownError:
            pass
        await self.client.close()


async def play_out(side: BattleSide, policy: Policy, table: MoveTable, rng: random.Random) -> None:
    """Play ``side`` to the end of its battle with ``policy``."""
    while (choices := await side.next_decision()) is not None:
        await side.decide(policy(choices, table, rng))


async def start_battle(
    url: str, agent_name: str, opponent_name: str, battle_format: str, timeout: float
) -> tuple[BattleSide, BattleSide]:
    """Log both users in, let the agent challenge the opponent to ``battle_format`` and wait until both are
    in the battle room; return ``(agent side, opponent side)``. Closes both connections when it fails."""
    agent = ShowdownClient(url, agent_name, timeout)
    opponent = ShowdownClient(url, opponent_name, timeout)
    sides = (BattleSide(agent), BattleSide(opponent))
    accept: Optional[asyncio.Task] = None
    try:
        await asyncio.gather(agent.connect(), opponent.connect())
        accept = asyncio.create_task(opponent.accept_challenge_from(agent_name))
        await agent.challenge(opponent_name, battle_format)
        # the agent's join sees a refused challenge (a |popup|) at once, without waiting for the opponent
        await asyncio.gather(accept, sides[0].join())
        await sides[1].join()
    except BaseException:
        if accept is not None:
            accept.cancel()
        await asyncio.gather(agent.close(), opponent.close())
        raise
    return sides
