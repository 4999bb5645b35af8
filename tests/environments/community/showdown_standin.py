"""A stand-in Pokémon Showdown server for the tests: a websocket server on loopback speaking enough of
Showdown's protocol for short deterministic battles.

It sends ``|challstr|``, accepts guest logins (``/trn NAME,0,``), relays ``/challenge`` as
``|updatechallenges|``, starts a battle on ``/accept`` and plays it from the teams of a JSON file
(``tests/fixtures/community/pokemon-showdown/standin_teams.json``): ``|request|`` JSON to each side, then the
turn's log (``|move|``, ``|-damage|``, ``|faint|``, ``|turn|``, ``|win|``). The challenger is ``p1`` and acts
first each turn; a move takes its power from the target's HP; a fainted active Pokémon is replaced through a
forced-switch request. Invalid choices get ``|error|[Invalid choice]``; ``/forfeit`` ends the battle.
Every ``/choose`` received is kept in :attr:`StandInShowdown.choices` as ``(user, choice)``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from aiohttp import WSMsgType, web

TEAMS = Path(__file__).parents[2] / "fixtures" / "community" / "pokemon-showdown" / "standin_teams.json"


def _id(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


@dataclass
class _Side:
    slot: str
    user: str
    team: list[dict[str, Any]]
    active: int = 0
    choice: Optional[str] = None
    forced: bool = False

    def healthy(self) -> list[int]:
        return [i for i, mon in enumerate(self.team) if mon["hp"] > 0]


@dataclass
class _Battle:
    room: str
    sides: list[_Side]
    moves: dict[str, dict[str, Any]]
    turn: int = 1
    rqid: int = 0
    over: bool = False
    log: list[str] = field(default_factory=list)


class StandInShowdown:
    """The stand-in server (see the module docstring); :meth:`start` runs it on a thread, :meth:`stop` ends it."""

    def __init__(self, teams_path: Path = TEAMS, port: int = 0):
        self.data = json.loads(Path(teams_path).read_text())
        self.port = port
        self.choices: list[tuple[str, str]] = []
        self.users: dict[str, web.WebSocketResponse] = {}
        self.battles: dict[str, _Battle] = {}
        self._challenges: dict[str, tuple[str, str]] = {}  # challenged id -> (challenger name, format)
        self._loop = asyncio.new_event_loop()
        self._runner: Optional[web.AppRunner] = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/showdown/websocket"

    def start(self) -> StandInShowdown:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=30)
        return self

    def stop(self) -> None:
        """Close every connection and stop the server (a second call does nothing)."""
        if not self._thread.is_alive():
            return
        for ws in list(self.users.values()):
            asyncio.run_coroutine_threadsafe(ws.close(), self._loop).result(timeout=30)
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_get("/showdown/websocket", self._socket)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str("|challstr|4|standinchallenge")
        name: Optional[str] = None
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                break
            room, _, text = message.data.partition("|")
            name = await self._command(ws, name, room, text.strip())
        if name is not None:
            self.users.pop(_id(name), None)
        return ws

    async def _command(
        self, ws: web.WebSocketResponse, name: Optional[str], room: str, text: str
    ) -> Optional[str]:
        command, _, arg = text.partition(" ")
        if command == "/trn":
            wanted = arg.split(",")[0].strip()
            if _id(wanted) in self.users:
                await ws.send_str(f"|nametaken|{wanted}|Someone is already using the name.")
                return name
            self.users[_id(wanted)] = ws
            await ws.send_str(f"|updateuser| {wanted}|1|1|{{}}")
            return wanted
        if command == "/challenge" and name:
            opponent, _, battle_format = (part.strip() for part in arg.partition(","))
            if battle_format != self.data["format"]:
                await ws.send_str(f"|popup|Your team was rejected: {battle_format} needs a team.")
                return name
            self._challenges[_id(opponent)] = (name, battle_format)
            table = json.dumps({"challengesFrom": {_id(name): battle_format}, "challengeTo": None})
            await self._send(opponent, f"|updatechallenges|{table}")
        elif command == "/accept" and name and _id(name) in self._challenges:
            challenger, battle_format = self._challenges.pop(_id(name))
            await self._start(challenger, name, battle_format)
        elif command == "/choose" and room in self.battles and name:
            choice, _, _rqid = arg.partition("|")
            self.choices.append((name, choice))
            await self._choose(self.battles[room], name, choice)
        elif command == "/forfeit" and room in self.battles and name:
            battle = self.battles[room]
            if not battle.over:
                winner = next(side.user for side in battle.sides if side.user != name)
                await self._end(battle, [f"|-message|{name} forfeited.", f"|win|{winner}"])
        return name

    async def _send(self, user: str, text: str) -> None:
        ws = self.users.get(_id(user))
        if ws is not None and not ws.closed:
            await ws.send_str(text)

    async def _start(self, p1: str, p2: str, battle_format: str) -> None:
        room = f"battle-{battle_format}-{len(self.battles) + 1}"
        sides = [_Side(slot, user, copy.deepcopy(self.data[slot])) for slot, user in (("p1", p1), ("p2", p2))]
        for mon in sides[0].team + sides[1].team:
            mon["maxhp"] = mon["hp"]
        battle = _Battle(room, sides, self.data["moves"])
        self.battles[room] = battle
        for side in sides:
            await self._send(side.user, f">{room}\n|init|battle\n|title|{p1} vs. {p2}")
        await self._requests(battle)
        lines = ["|", f"|player|p1|{p1}|1|", f"|player|p2|{p2}|1|", "|start"]
        lines += [self._switch_line(side) for side in sides] + ["|turn|1"]
        await self._broadcast(battle, lines)

    async def _broadcast(self, battle: _Battle, lines: list[str]) -> None:
        for side in battle.sides:
            await self._send(side.user, f">{battle.room}\n" + "\n".join(lines))

    def _mon_ident(self, side: _Side, index: Optional[int] = None) -> str:
        mon = side.team[side.active if index is None else index]
        return f"{side.slot}a: {mon['species']}"

    def _switch_line(self, side: _Side) -> str:
        mon = side.team[side.active]
        return f"|switch|{self._mon_ident(side)}|{mon['species']}, L{mon['level']}|{mon['hp']}/{mon['maxhp']}"

    async def _requests(self, battle: _Battle, waiting: Optional[_Side] = None) -> None:
        for side in battle.sides:
            battle.rqid += 1
            request: dict[str, Any] = {"side": self._side_json(battle, side), "rqid": battle.rqid}
            if side.forced:
                request["forceSwitch"] = [True]
            elif waiting is not None:
                request["wait"] = True
            else:
                request["active"] = [{"moves": self._moves_json(battle, side)}]
            await self._send(side.user, f">{battle.room}\n|request|{json.dumps(request)}")

    def _side_json(self, battle: _Battle, side: _Side) -> dict[str, Any]:
        pokemon = []
        for index, mon in enumerate(side.team):
            condition = f"{mon['hp']}/{mon['maxhp']}" if mon["hp"] > 0 else "0 fnt"
            pokemon.append({
                "ident": f"{side.slot}: {mon['species']}", "details": f"{mon['species']}, L{mon['level']}",
                "condition": condition, "active": index == side.active, "moves": mon["moves"],
                "item": mon["item"], "ability": mon["ability"],
            })  # fmt: skip
        return {"name": side.user, "id": side.slot, "pokemon": pokemon}

    def _moves_json(self, battle: _Battle, side: _Side) -> list[dict[str, Any]]:
        mon = side.team[side.active]
        moves = []
        for move_id in mon["moves"]:
            move = battle.moves[move_id]
            moves.append({"move": move["name"], "id": move_id, "pp": move["pp"], "maxpp": move["pp"],
                          "target": "normal", "disabled": False})  # fmt: skip
        return moves

    def _valid(self, side: _Side, choice: str) -> bool:
        kind, _, number = choice.partition(" ")
        if not number.isdigit():
            return False
        index = int(number) - 1
        if kind == "switch":
            return 0 <= index < len(side.team) and index != side.active and side.team[index]["hp"] > 0
        return kind == "move" and not side.forced and 0 <= index < len(side.team[side.active]["moves"])

    async def _choose(self, battle: _Battle, user: str, choice: str) -> None:
        side = next((s for s in battle.sides if _id(s.user) == _id(user)), None)
        if side is None or battle.over:
            return
        if not self._valid(side, choice):
            await self._send(user, f">{battle.room}\n|error|[Invalid choice] Can't do {choice!r}")
            return
        side.choice = choice
        if any(s.forced for s in battle.sides):
            if side.forced:
                await self._forced_switch(battle, side)
            return
        if all(s.choice for s in battle.sides):
            await self._resolve(battle)

    async def _forced_switch(self, battle: _Battle, side: _Side) -> None:
        side.active, side.forced, side.choice = int(side.choice.split()[1]) - 1, False, None
        battle.turn += 1
        await self._requests(battle)
        await self._broadcast(battle, ["|", self._switch_line(side), f"|turn|{battle.turn}"])

    async def _resolve(self, battle: _Battle) -> None:
        lines = ["|"]
        for side in battle.sides:  # switches go first, then moves in side order
            if side.choice.startswith("switch"):
                side.active = int(side.choice.split()[1]) - 1
                lines.append(self._switch_line(side))
        first, second = battle.sides
        for side, foe in ((first, second), (second, first)):
            if side.choice.startswith("move") and side.team[side.active]["hp"] > 0:
                lines += self._attack(battle, side, foe)
        for side in battle.sides:
            side.choice = None
        losers = [side for side in battle.sides if not side.healthy()]
        if losers:
            winner = next(s.user for s in battle.sides if s is not losers[0])
            await self._end(battle, [*lines, f"|win|{winner}"])
            return
        fainted = [side for side in battle.sides if side.team[side.active]["hp"] == 0]
        if fainted:
            for side in fainted:
                side.forced = True
            await self._requests(battle, waiting=fainted[0])
            await self._broadcast(battle, [*lines, "|upkeep"])
            return
        battle.turn += 1
        await self._requests(battle)
        await self._broadcast(battle, [*lines, "|upkeep", f"|turn|{battle.turn}"])

    def _attack(self, battle: _Battle, side: _Side, foe: _Side) -> list[str]:
        mon, target = side.team[side.active], foe.team[foe.active]
        move_id = mon["moves"][int(side.choice.split()[1]) - 1]
        move = battle.moves[move_id]
        lines = [f"|move|{self._mon_ident(side)}|{move['name']}|{self._mon_ident(foe)}"]
        if move["power"] and target["hp"] > 0:
            target["hp"] = max(0, target["hp"] - move["power"])
            condition = f"{target['hp']}/{target['maxhp']}" if target["hp"] else "0 fnt"
            lines.append(f"|-damage|{self._mon_ident(foe)}|{condition}")
            if not target["hp"]:
                lines.append(f"|faint|{self._mon_ident(foe)}")
        return lines

    async def _end(self, battle: _Battle, lines: list[str]) -> None:
        battle.over = True
        await self._broadcast(battle, lines)
